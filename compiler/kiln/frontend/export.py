"""The compiler's front end: find the model, run it once, export it.

A model is a zoo or architecture name (kiln.models) or the path of a Python file that defines
`ModelUnderTest` (an nn.Module) and `ModelInputs` (a tuple of example
tensors), the convention of ExecuTorch's aot_arm_compiler.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from kiln import models
from kiln.errors import ModelError, UsageError


@dataclass
class LoadedModel:
    name: str
    module: torch.nn.Module  # in eval mode
    inputs: tuple[torch.Tensor, ...]


def load_model(model: str) -> LoadedModel:
    """A zoo model by name, or the model a Python file defines."""
    if models.find(model) is not None:
        module, inputs = models.load(model)
        return LoadedModel(model, module.eval(), tuple(inputs))
    path = Path(model)
    if not path.is_file():
        known = ", ".join([*models.MODELS, *models.ARCHITECTURES, *models.TRANSFORMERS])
        raise UsageError(f"{model!r} is neither a zoo model ({known}) nor a file")
    namespace = _import_file(path)
    module = namespace.get("ModelUnderTest")
    inputs = namespace.get("ModelInputs")
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"{path} defines no ModelUnderTest (an nn.Module instance)")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, tuple) or not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ModelError(f"{path} defines no ModelInputs (a tuple of example tensors)")
    return LoadedModel(path.stem, module.eval(), inputs)


def _import_file(path: Path) -> dict:
    name = f"kiln_user_model_{abs(hash(path.resolve()))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's code: any failure is reported, not raised on
        raise ModelError(f"{path}: importing it failed: {_where(error, path)}") from None
    finally:
        sys.modules.pop(name, None)
    return vars(module)


def export(model: LoadedModel) -> torch.export.ExportedProgram:
    """Runs the model once on its inputs, then torch.export (non-strict)."""
    try:
        with torch.no_grad():
            model.module(*model.inputs)
    except Exception as error:
        raise ModelError(f"model {model.name} fails on its example inputs: {_where(error)}") from None
    try:
        with warnings.catch_warnings():
            # nn.GRU/LSTM/RNN reassign their flat weight list while being traced; torch.export
            # warns about it to the model's author, though the export is right (kiln unrolls them)
            warnings.filterwarnings(
                "ignore", r"The tensor attributes .*_flat_weights\[\d+\].* were assigned during export", UserWarning
            )
            return torch.export.export(model.module, model.inputs, strict=False)
    except Exception as error:
        raise ModelError(f"torch.export cannot capture model {model.name}: {_where(error)}") from None


def _where(error: BaseException, path: Path | None = None) -> str:
    """`Type: first line of the message (file:line)`, the line in the user's file if known."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    if isinstance(error, SyntaxError) and error.lineno:
        return f"{text} (line {error.lineno})"
    frames = traceback.extract_tb(error.__traceback__)
    if path is not None:
        frames = [f for f in frames if Path(f.filename).resolve() == path.resolve()] or frames
    if frames:
        text += f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return text
