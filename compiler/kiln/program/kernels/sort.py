"""Sorting along a dim: sort and topk, ops with two outputs (firmware/runtime/kernels/sort.cpp).

ExecuTorch's out variants write both outputs:
    aten::sort.values(Tensor self, int dim=-1, bool descending=False, *, Tensor(a!) values,
                      Tensor(b!) indices)
    aten::topk.values(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True, *,
                      Tensor(a!) values, Tensor(b!) indices)
A KernelCall lists the schema's arguments, out tensors included, then the returned value: one
TensorList of the out tensors (ExecuTorch's emitter returns several out arguments so):
self, dim, descending, values, indices, [values, indices].

Order (the same in the C++ kernels): stable. Ascending puts the smaller value first, a NaN
after every number; descending the larger first, a NaN before every number; equal values
(-0.0 and 0.0 are equal, as are two NaNs) keep their index order. This is PyTorch's
sort(stable=True). topk(k, largest) is the first k of that sort (descending when largest):
among equal values the lowest index is taken and listed first. PyTorch's own sort(stable=False)
and topk order equal values as their CPU algorithm happens to (unspecified); kiln's order is one
of the orders they permit, and sorted=False (any order) gets the sorted one. Values keep the
input's type (float32, int32 or int64); indices are int64.
"""

from __future__ import annotations

import numpy as np
import torch

from kiln.errors import HostError
from kiln.program.kernels.core import Kernel

aten = torch.ops.aten

TYPES = ("float32", "int32", "int64")


def _dim(dim: int, rank: int) -> int:
    span = max(rank, 1)  # a 0-d tensor takes dim 0 and -1, as PyTorch
    if not -span <= dim < span:
        raise HostError(f"dimension {dim} is out of range for a tensor of rank {rank}")
    return dim % span


def order(x: np.ndarray, dim: int, descending: bool) -> np.ndarray:
    """The stable sort's indices of `x` along `dim` (int64), NaN greatest, as above."""
    if not descending:
        return np.argsort(x, axis=dim, kind="stable").astype(np.int64)  # numpy puts NaN last too
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        # lexsort: the last key is the primary one; NaN first (False < True), then larger first
        return np.lexsort((-np.where(nan, 0, x), ~nan), axis=dim).astype(np.int64)
    return np.argsort(~x, axis=dim, kind="stable").astype(np.int64)  # ~x = -x - 1: no overflow


def _sorted(x: np.ndarray, dim: int, descending: bool, k: int | None = None):
    x = np.asarray(x)
    if x.ndim == 0:
        if k not in (None, 0, 1):
            raise HostError(f"k = {k} is out of range for a tensor of one element")
        return (x.copy(), np.zeros((), np.int64)) if k != 0 else (x[None][:0].reshape(0), np.zeros(0, np.int64))
    dim = _dim(dim, x.ndim)
    if k is not None and not 0 <= k <= x.shape[dim]:
        raise HostError(f"k = {k} is out of range for a dim of size {x.shape[dim]}")
    indices = order(x, dim, descending)
    if k is not None:
        indices = np.take(indices, np.arange(k), axis=dim)
    return np.take_along_axis(x, indices, axis=dim), indices


def _sort(x, dim=-1, descending=False):
    return _sorted(x, int(dim), bool(descending))


def _topk(x, k, dim=-1, largest=True, sorted_=True):
    return _sorted(x, int(dim), bool(largest), int(k))


def _accepts(op) -> bool:
    return op.inputs[0].dtype in TYPES and op.inputs[0].qparams is None and len(op.outputs) == 2


SORT = Kernel("aten::sort", "values", ("self", "dim", "descending"), _sort, _accepts, outputs=2)
KERNELS = {
    aten.sort.default: SORT,
    aten.sort.stable: SORT,  # kiln's sort is always stable
    aten.topk.default: Kernel(
        "aten::topk", "values", ("self", "k", "dim", "largest", "sorted"), _topk, _accepts, outputs=2
    ),
}
