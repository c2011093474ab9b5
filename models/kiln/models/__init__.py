"""kiln's model zoo.

``MODELS`` maps each zoo name, in a fixed order, to a ``ZooEntry``; ``load(name)``
builds one: an ``nn.Module`` in eval mode with deterministic weights and a
tuple of example inputs. Each model lives in its own file here, which also
defines ``ModelUnderTest`` and ``ModelInputs`` in the convention of
ExecuTorch's ``aot_arm_compiler`` (built on first access where that is costly).

Importing this package imports no model file and builds nothing; an entry's
model file is imported when the entry is built.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kiln.errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["MODELS", "ZooEntry", "load"]


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    """One model of the zoo.

    ``build()`` returns ``(module in eval mode, tuple of example inputs)``. The
    tolerances say how closely a compiled, quantized model must match the
    reference: at most ``tolerance_steps`` quantization steps of difference on
    at least ``tolerance_fraction`` of the output elements.
    """

    name: str
    summary: str
    build: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
    tolerance_steps: int = 1
    tolerance_fraction: float = 0.99


def _build(module: str, *args: Any) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return importlib.import_module(f"{__name__}.{module}").build(*args)


def _entry(name: str, summary: str, module: str, *args: Any) -> ZooEntry:
    return ZooEntry(name, summary, functools.partial(_build, module, *args))


MODELS: Mapping[str, ZooEntry] = types.MappingProxyType(
    {
        entry.name: entry
        for entry in (
            _entry("tiny_cnn", "two 3x3 convolutions, global average pool, linear; 1x1x8x8 -> 4", "tiny_cnn"),
            _entry("ds_cnn", "MLPerf Tiny keyword spotting DS-CNN; 1x1x49x10 -> 12", "ds_cnn"),
            _entry("resnet8", "MLPerf Tiny image classification ResNet-8; 1x3x32x32 -> 10", "resnet8"),
            _entry(
                "mobilenet_v1_025",
                "MLPerf Tiny visual wake words MobileNetV1 x0.25; 1x3x96x96 -> 2",
                "mobilenet_v1_025",
            ),
            _entry(
                "fc_autoencoder",
                "MLPerf Tiny anomaly detection fully connected autoencoder; 1x640 -> 640",
                "fc_autoencoder",
            ),
            # Integer and float results part at rare rounding ties (6e-6 of the first layer's
            # outputs, each one step, measured); 52 layers of untrained weights amplify those
            # to a few steps at the logits, so this model declares a wider tolerance.
            dataclasses.replace(
                _entry("mobilenet_v2", "MobileNetV2 x1.0; 1x3x224x224 -> 1000", "mobilenet_v2", 1.0),
                tolerance_steps=8,
            ),
            _entry("mobilenet_v2_035", "MobileNetV2 x0.35; 1x3x96x96 -> 1000", "mobilenet_v2", 0.35),
            _entry("digits", "small CNN trained on scikit-learn's 8x8 digits; 1x1x8x8 -> 10", "digits"),
        )
    }
)


def load(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Build the zoo model `name`: (module in eval mode, tuple of example inputs)."""
    try:
        entry = MODELS[name]
    except KeyError:
        raise UsageError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None
    return entry.build()
