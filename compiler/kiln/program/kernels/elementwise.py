"""Elementwise float32 kernels: activations, transcendental functions, broadcasting arithmetic."""

from __future__ import annotations

import numpy as np
import torch

from kiln.program.kernels.core import Kernel, binary, exp32, log32, tanh32

aten = torch.ops.aten


KERNELS: dict[object, Kernel] = {
    aten.relu.default: Kernel("aten::relu", "out", ("self",), lambda x: np.maximum(x, np.float32(0))),
    aten.hardtanh.default: Kernel("aten::hardtanh", "out", ("self", "min_val", "max_val"),
                                  lambda x, lo, hi: np.clip(x, np.float32(lo), np.float32(hi))),
    aten.sigmoid.default: Kernel("aten::sigmoid", "out", ("self",),
                                 lambda x: (np.float32(1) / (np.float32(1) + exp32(-x))).astype(np.float32)),
    aten.tanh.default: Kernel("aten::tanh", "out", ("self",), tanh32),
    aten.add.Tensor: Kernel("aten::add", "out", ("self", "other", "alpha"), binary(np.add),
                            lambda op: op.arg("alpha") in (None, 1)),
    aten.mul.Tensor: Kernel("aten::mul", "out", ("self", "other"), binary(np.multiply)),
    aten.sub.Tensor: Kernel("aten::sub", "out", ("self", "other", "alpha"), binary(np.subtract),
                            lambda op: op.arg("alpha") in (None, 1)),
    aten.exp.default: Kernel("aten::exp", "out", ("self",), exp32),
    aten.log.default: Kernel("aten::log", "out", ("self",), log32),
    aten.reciprocal.default: Kernel("aten::reciprocal", "out", ("self",),
                                    lambda x: (np.float32(1) / x).astype(np.float32)),
}
