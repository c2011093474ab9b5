"""Kernels that move or copy values without arithmetic."""

from __future__ import annotations

import numpy as np
import torch

from kiln.program.kernels.core import Derived, Kernel

aten = torch.ops.aten


KERNELS: dict[object, Kernel] = {
    **{t: Kernel("aten::view_copy", "out", ("self", Derived(lambda op: list(op.output.shape))),
                 lambda x, size: np.ascontiguousarray(x).reshape(size))
       for t in (aten.view.default, aten.reshape.default, aten.flatten.using_ints, aten.squeeze.dim,
                 aten.squeeze.dims, aten.unsqueeze.default)},
}
