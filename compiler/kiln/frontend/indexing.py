"""Decompositions of PyTorch's indexing by integer tensors (x[..., index, ...] and its assignment,
aten.index and aten.index_put) into the vocabulary's gather and scatter along one dim
(index_select, index_copy), registered in decompose.COMPOSITES like the others."""

from __future__ import annotations

import torch

from kiln.frontend.decompose import _rank, _shape, decomposes
from kiln.frontend.rewrite import attribute, value

aten = torch.ops.aten


@decomposes(
    aten.index_put.default,
    into="one 0-D or 1-D integer index tensor along one dim, without accumulate: index_copy along that dim of "
    "the values broadcast to the rows they write, a negative index counted from the end as PyTorch does (a "
    "run-time index by where(index < 0, index + size, index)); else kept",
)
def put_as_index_copy(emit, node, a):
    x, values = a["self"], a["values"]
    tensors = [(d, i) for d, i in enumerate(a["indices"]) if i is not None]
    if a["accumulate"] or len(tensors) != 1:
        return None
    dim, index = tensors[0]
    if value(index).dtype not in (torch.int32, torch.int64) or _rank(index) > 1:
        return None
    shape, size = _shape(x), _shape(x)[dim]
    rows = shape[:dim] + [value(index).numel()] + shape[dim + 1 :]
    indexed = shape[:dim] + _shape(index) + shape[dim + 1 :]  # what x[..., index, ...] is
    if _shape(values) != indexed:
        widened = emit(aten.reshape.default, values, [1] * (len(indexed) - _rank(values)) + _shape(values))
        values = emit(aten.expand.default, widened, indexed)
    if indexed != rows:
        values = emit(aten.reshape.default, values, rows)
    return emit(aten.index_copy.default, x, dim, _from_zero(emit, index, size), values)


def _from_zero(emit, index, size: int):
    """An integer index tensor as a 1-D one whose negative entries count from the end of a dim of
    `size`, as PyTorch indexes: a constant's at compile time, a run-time one's by
    where(index < 0, index + size, index)."""
    tensor = attribute(emit.gm, index)
    if tensor is not None:
        return emit.constant(torch.where(tensor < 0, tensor + size, tensor).reshape(-1), "index")
    index = emit(aten.reshape.default, index, [-1]) if _rank(index) != 1 else index
    wrapped = emit(aten.add.Tensor, index, size)
    return emit(aten.where.self, emit(aten.lt.Scalar, index, 0), wrapped, index)


@decomposes(
    aten.index.Tensor,
    into="one integer index tensor along one dim, the others None (x[:, :, positions]): index_select along "
    "that dim of the index's entries, a negative one counted from the end as PyTorch does, then the index's "
    "shape in that dim; else kept",
)
def index_as_select(emit, node, a):
    x = a["self"]
    tensors = [(d, i) for d, i in enumerate(a["indices"]) if i is not None]
    if len(tensors) != 1 or value(tensors[0][1]).dtype not in (torch.int32, torch.int64):
        return None
    dim, index = tensors[0]
    selected = emit(aten.index_select.default, x, dim, _from_zero(emit, index, _shape(x)[dim]))
    return selected if _shape(selected) == _shape(node) else emit(aten.reshape.default, selected, _shape(node))
