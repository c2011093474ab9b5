"""The compiler's front end: find the model, run it once, export it.

A model is a zoo or architecture name (kiln.models) or the path of a Python file that defines
`ModelUnderTest` (an nn.Module) and `ModelInputs` (a tuple of example tensors, the convention of
ExecuTorch's aot_arm_compiler; or a dict of them, passed as keyword arguments; or a tuple of
tensors ending in such a dict).

The program's inputs are the example tensors in order: the positional ones, then the keyword
ones in the order the dict gives them. Its outputs are the tensors forward returns, flattened
depth first (torch.utils._pytree's order: tuples and lists in order, dicts in their order,
dataclasses and ModelOutput-like objects in field order); other values (None, numbers) are left
out. `io_paths` names each (docs/compiling.md).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from torch.fx import GraphModule, Node

from kiln import models
from kiln.errors import ModelError, UsageError


@dataclass
class LoadedModel:
    name: str
    module: torch.nn.Module  # in eval mode
    inputs: tuple[torch.Tensor, ...]  # the program's inputs: positional, then keyword arguments
    keywords: tuple[str, ...] = ()  # the names of the last len(keywords) inputs, passed by keyword

    def arguments(self) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        """(args, kwargs) of a call of the module on its example inputs."""
        positional = len(self.inputs) - len(self.keywords)
        return self.inputs[:positional], dict(zip(self.keywords, self.inputs[positional:]))


def load_model(model: str) -> LoadedModel:
    """A zoo model by name, or the model a Python file defines."""
    if models.find(model) is not None:
        module, inputs = models.load(model)
        return LoadedModel(model, module.eval(), tuple(inputs))
    path = Path(model)
    if not path.is_file():
        known = ", ".join([*models.MODELS, *models.ARCHITECTURES, *models.TRANSFORMERS, *models.LANGUAGE_MODELS])
        raise UsageError(f"{model!r} is neither a zoo model ({known}) nor a file")
    namespace = _import_file(path)
    module = namespace.get("ModelUnderTest")
    inputs = namespace.get("ModelInputs")
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"{path} defines no ModelUnderTest (an nn.Module instance)")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, dict):
        inputs = (inputs,)
    keywords = inputs[-1] if isinstance(inputs, tuple) and inputs and isinstance(inputs[-1], dict) else {}
    positional = inputs[:-1] if keywords else inputs
    tensors = (*positional, *keywords.values()) if isinstance(positional, tuple) else ()
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors) or not all(map(str.isidentifier, keywords)):
        raise ModelError(
            f"{path} defines no ModelInputs (a tuple of example tensors, a dict of them by argument name, "
            "or a tuple of tensors ending in such a dict)"
        )
    return LoadedModel(path.stem, module.eval(), tensors, tuple(keywords))


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
    args, kwargs = model.arguments()
    try:
        with torch.no_grad():
            output = model.module(*args, **kwargs)
    except Exception as error:
        raise ModelError(f"model {model.name} fails on its example inputs: {_where(error)}") from None
    _register_dataclasses(output)
    try:
        with warnings.catch_warnings():
            # nn.GRU/LSTM/RNN reassign their flat weight list while being traced; torch.export
            # warns about it to the model's author, though the export is right (kiln unrolls them)
            warnings.filterwarnings(
                "ignore", r"The tensor attributes .*_flat_weights\[\d+\].* were assigned during export", UserWarning
            )
            return torch.export.export(model.module, args, kwargs, strict=False)
    except Exception as error:
        raise ModelError(f"torch.export cannot capture model {model.name}: {_where(error)}") from None


def _register_dataclasses(output) -> None:
    """Registers the dataclass types in `output` that torch.export does not know as pytrees (it
    refuses them otherwise), so that it flattens them field by field."""
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        if type(output) not in pytree.SUPPORTED_NODES:
            torch.export.register_dataclass(type(output))
        children = [getattr(output, f.name) for f in dataclasses.fields(output)]
    elif isinstance(output, (list, tuple)):
        children = list(output)
    elif isinstance(output, dict):
        children = list(output.values())
    else:
        return
    for child in children:
        _register_dataclasses(child)


def io_paths(module: GraphModule) -> tuple[list[str], list[str]]:
    """(the argument name of each program input, the path of each program output in what forward
    returns: "" for a lone tensor, "[1]" for a tuple's item, "['logits']" for a dict's, ".logits"
    for a dataclass field) of ExportedProgram.module(); an output of a type whose pytree has no
    keys is named by its index among the outputs, "[n]"."""
    inputs = [n.name for n in module.graph.nodes if n.op == "placeholder"]
    leaves = module.graph.output_node().args[0]  # what forward returns, flat (export's out_spec leaves)
    leaves = list(leaves) if isinstance(leaves, (list, tuple)) else [leaves]
    spec = getattr(module.graph._codegen, "pytree_info", None)
    try:
        returned = pytree.tree_unflatten(list(range(len(leaves))), spec.out_spec)
        paths = [pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(returned)[0]]
    except Exception:  # no pytree info, or a node type registered without keys
        paths = [f"[{i}]" for i in range(len(leaves))]
    return inputs, [p for p, leaf in zip(paths, leaves) if isinstance(leaf, Node)]


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
