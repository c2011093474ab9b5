"""Reductions along dims of float32 tensors, and softmax."""

from __future__ import annotations

import numpy as np
import torch

from kiln.program.kernels.core import Fixed, Kernel, exp32, log32

aten = torch.ops.aten


def _softmax(x, dim, log):
    """Softmax along `dim`: the max subtracted, exp, the sum taken in index order."""
    shifted = (x - np.max(x, axis=dim, keepdims=True)).astype(np.float32)
    exps = exp32(shifted)
    total = _sum_in_order(exps, [dim], True)
    return (shifted - log32(total) if log else exps / total).astype(np.float32)


def _sum_in_order(x, dims, keepdim):
    """Sum over `dims` (one) in index order, in float32."""
    (dim,) = dims
    dim %= x.ndim
    acc = np.zeros_like(np.take(x, [0], axis=dim), dtype=np.float32)
    for i in range(x.shape[dim]):
        acc += np.take(x, [i], axis=dim)
    return acc if keepdim else np.squeeze(acc, axis=dim)


KERNELS: dict[object, Kernel] = {
    aten.amax.default: Kernel("aten::amax", "out", ("self", "dim", "keepdim"),
                              lambda x, dim, keepdim: np.max(x, axis=tuple(dim), keepdims=bool(keepdim))),
    aten.sum.dim_IntList: Kernel("aten::sum", "IntList_out", ("self", "dim", "keepdim", Fixed(None)),
                                 lambda x, dim, keepdim, dtype: _sum_in_order(x, dim, keepdim),
                                 lambda op: op.arg("dim") is not None and len(op.arg("dim")) == 1),
    **{t: Kernel("aten::_softmax", "out", ("self", "dim", Fixed(False)),
                 lambda x, dim, half: _softmax(x, dim, log=False)) for t in (aten.softmax.int, aten._softmax.default)},
    **{t: Kernel("aten::_log_softmax", "out", ("self", "dim", Fixed(False)),
                 lambda x, dim, half: _softmax(x, dim, log=True))
       for t in (aten.log_softmax.int, aten._log_softmax.default)},
}
