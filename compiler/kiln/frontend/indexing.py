"""Decompositions of PyTorch's indexing by integer tensors (x[..., index, ...] and its assignment,
aten.index and aten.index_put) into the vocabulary's gather and scatter along one dim
(index_select, index_copy), registered in decompose.COMPOSITES like the others."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from kiln.errors import ModelError
from kiln.frontend.decompose import _rank, _shape, decomposes
from kiln.frontend.rewrite import Emitter, attribute, value

aten = torch.ops.aten


@decomposes(
    aten.index_put.default,
    into="one 0-D or 1-D integer index tensor along one dim, without accumulate: index_copy along that dim of "
    "the values broadcast to the rows they write, a negative index counted from the end as PyTorch does (a "
    "run-time index by where(index < 0, index + size, index)); several integer index tensors, or one of more "
    "dims: index_copy of rows of the tensor flattened up to the last indexed dim, at the rows' linear "
    "indices (_LinearRows); else kept",
)
def put_as_index_copy(emit, node, a):
    x, values = a["self"], a["values"]
    tensors = [(d, i) for d, i in enumerate(a["indices"]) if i is not None]
    if a["accumulate"] or not tensors or any(value(i).dtype not in (torch.int32, torch.int64) for _, i in tensors):
        return None
    if len(tensors) > 1 or _rank(tensors[0][1]) > 1:
        return _put_rows(emit, node, x, a["indices"], values)
    dim, index = tensors[0]
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
    "shape in that dim; several integer index tensors: index_select of rows of the tensor flattened up to "
    "the last indexed dim, at the rows' linear indices (_LinearRows); else kept",
)
def index_as_select(emit, node, a):
    x = a["self"]
    tensors = [(d, i) for d, i in enumerate(a["indices"]) if i is not None]
    if not tensors or any(value(i).dtype not in (torch.int32, torch.int64) for _, i in tensors):
        return None
    if len(tensors) > 1:
        return _select_rows(emit, node, x, a["indices"])
    dim, index = tensors[0]
    selected = emit(aten.index_select.default, x, dim, _from_zero(emit, index, _shape(x)[dim]))
    return selected if _shape(selected) == _shape(node) else emit(aten.reshape.default, selected, _shape(node))


@dataclass
class _Layout:
    """Where x[indices]'s axes come from, as PyTorch lays it out: the indices' broadcast dims in
    place of the indexed dims when those are adjacent, else first; the sliced dims (None) as they
    are; then x's dims after the last indexed one (`trailing`). `axes` names each axis before the
    trailing ones: ("dim", d) a sliced dim of x, ("index", k) the k-th broadcast dim."""

    indices: list  # one entry per dim of x: an index tensor's node or None
    indexed: list[int]  # the dims with an index tensor
    broadcast: list[int]  # the index tensors' broadcast shape
    axes: list[tuple[str, int]]
    shape: list[int]  # x[indices]'s shape without the trailing dims
    trailing: list[int]

    @staticmethod
    def of(x: Node, indices) -> _Layout:
        shape = _shape(x)
        indices = list(indices) + [None] * (len(shape) - len(indices))
        indexed = [d for d, i in enumerate(indices) if i is not None]
        first, last = indexed[0], indexed[-1]
        broadcast = list(torch.broadcast_shapes(*(tuple(_shape(indices[d])) for d in indexed)))
        sliced = [d for d in range(last + 1) if indices[d] is None]
        axes = [("index", k) for k in range(len(broadcast))]
        adjacent = indexed == list(range(first, last + 1))
        axes = [("dim", d) for d in sliced] + axes if adjacent else axes + [("dim", d) for d in sliced]
        out = [shape[n] if kind == "dim" else broadcast[n] for kind, n in axes]
        return _Layout(indices, indexed, broadcast, axes, out, shape[last + 1 :])

    def view(self, d: int) -> list[int]:
        """The shape that places dim d's index tensor (right-aligned in the broadcast dims) on x[indices]'s axes."""
        view = [1] * len(self.axes)
        where = [p for p, (kind, _) in enumerate(self.axes) if kind == "index"]
        for p, size in zip(where[len(where) - _rank(self.indices[d]) :], _shape(self.indices[d]), strict=True):
            view[p] = size
        return view


def _one_index(emit: Emitter, x: Node, layout: _Layout) -> tuple[int, list] | None:
    """When all but one of the index tensors are slices in disguise (a constant 0 into a dim of size
    1; a constant arange(size) along one broadcast dim), x[indices] is x[..., index, ...] with the
    remaining (run-time) index of at most one non-1 dim: that dim d and, for each axis of x[indices]
    (trailing ones too), the dim of x it runs along (None: an axis of size 1). Else None."""
    shape = _shape(x)
    runtime = [d for d in layout.indexed if attribute(emit.gm, layout.indices[d]) is None]
    if len(runtime) != 1:
        return None
    labels: list = [d if kind == "dim" else None for kind, d in layout.axes] + list(
        range(len(shape) - len(layout.trailing), len(shape))
    )
    for d in layout.indexed:
        view = layout.view(d)
        varying = [p for p, size in enumerate(view) if size > 1]
        if len(varying) > 1 or any(labels[p] is not None for p in varying):
            return None
        if varying:
            labels[varying[0]] = d
        constant = attribute(emit.gm, layout.indices[d])
        if constant is None:
            continue
        wrapped = torch.where(constant < 0, constant + shape[d], constant).reshape(-1)
        if not (torch.equal(wrapped, torch.arange(shape[d])) or (shape[d] == 1 and not wrapped.any())):
            return None
    return runtime[0], labels


def _to_rows(emit: Emitter, t: Node, labels: list, rows: list[int]) -> Node:
    """`t`, laid out as x[indices] (`labels`: each axis's dim of x), as x's dims in order (`rows`)."""
    kept = [p for p, label in enumerate(labels) if label is not None]
    t = emit(aten.reshape.default, t, [_shape(t)[p] for p in kept])
    order = sorted(range(len(kept)), key=lambda i: labels[kept[i]])
    if order != list(range(len(kept))):
        t = emit(aten.permute.default, t, order)
    return emit(aten.reshape.default, t, rows)


def _from_rows(emit: Emitter, t: Node, labels: list, full: list[int]) -> Node:
    """The inverse of _to_rows: `t` in x's dim order as x[indices]'s layout `full`."""
    kept = sorted((label, p) for p, label in enumerate(labels) if label is not None)
    t = emit(aten.reshape.default, t, [full[p] for _, p in kept])
    order = [i for _, i in sorted((p, i) for i, (_, p) in enumerate(kept))]
    if order != list(range(len(kept))):
        t = emit(aten.permute.default, t, order)
    return emit(aten.reshape.default, t, full)


@dataclass
class _LinearRows:
    """x[indices] with several integer index tensors (or one of several dims) as rows of x flattened
    up to its last indexed dim: `index` is the 1-D linear row of each element of x[indices] without
    x's trailing dims, in x[indices]'s order (_Layout). Each index is counted from the end when
    negative, as PyTorch does, and checked against its own dim: a constant one here (ModelError), a
    run-time one by making the row negative when it is out of range, which the gather's or scatter's
    index check (kiln.checked_index) then refuses, as PyTorch would have."""

    index: Node
    rows: int  # x's rows: the product of its dims up to the last indexed one

    @staticmethod
    def of(emit: Emitter, node: Node, x: Node, layout: _Layout) -> _LinearRows:
        shape, last = _shape(x), layout.indexed[-1]
        rows = math.prod(shape[: last + 1])
        fixed = torch.zeros(layout.shape, dtype=torch.int64)  # the rows' constant part
        terms = []  # run-time parts, each broadcastable to layout.shape
        for d in range(last + 1):
            stride = math.prod(shape[d + 1 : last + 1])
            if layout.indices[d] is None:
                view = [1] * len(layout.axes)
                view[layout.axes.index(("dim", d))] = shape[d]
                fixed = fixed + torch.arange(shape[d]).reshape(view) * stride
                continue
            constant = attribute(emit.gm, layout.indices[d])
            if constant is not None:
                wrapped = torch.where(constant < 0, constant + shape[d], constant).to(torch.int64)
                if bool(((wrapped < 0) | (wrapped >= shape[d])).any()):
                    raise ModelError(f"node {node.name} ({node.target.__name__}): an index of dim {d} is out of range")
                fixed = fixed + wrapped.reshape(layout.view(d)) * stride
                continue
            poison = -rows * (len(layout.indexed) + 1)  # below any sum of the other parts
            terms.append(_checked_term(emit, layout.indices[d], shape[d], stride, layout.view(d), poison))
        linear = emit.constant(fixed, "rows")
        for term in terms:
            linear = emit(aten.add.Tensor, linear, term)
        if _shape(linear) != layout.shape:
            linear = emit(aten.expand.default, linear, layout.shape)
        return _LinearRows(emit(aten.reshape.default, linear, [-1]), rows)


def _checked_term(emit: Emitter, index: Node, size: int, stride: int, view: list[int], poison: int) -> Node:
    """A run-time index's part of the linear rows: index * stride in `view`'s shape (int64), a
    negative index counted from the end of its dim of `size`, and `poison` (a value that makes the
    whole sum negative) where the index is out of range."""
    if value(index).dtype != torch.int64:
        index = emit(aten._to_copy.default, index, dtype=torch.int64)
    index = emit(aten.reshape.default, index, view)
    index = emit(aten.where.self, emit(aten.lt.Scalar, index, 0), emit(aten.add.Tensor, index, size), index)
    bad = emit(aten.logical_or.default, emit(aten.lt.Scalar, index, 0), emit(aten.ge.Scalar, index, size))
    scaled = emit(aten.mul.Tensor, index, stride)
    return emit(aten.where.self, bad, emit(aten.full_like.default, scaled, poison), scaled)


def _put_rows(emit: Emitter, node: Node, x: Node, indices, values: Node) -> Node:
    """x[indices] = values with several index tensors (or one of several dims): as x[..., index, ...]
    = values when the others are slices in disguise (_one_index), else index_copy of the values'
    rows into x flattened to its rows (_LinearRows); the values broadcast to x[indices]'s shape."""
    layout, shape = _Layout.of(x, indices), _shape(x)
    full = layout.shape + layout.trailing
    if _shape(values) != full:
        widened = emit(aten.reshape.default, values, [1] * (len(full) - _rank(values)) + _shape(values))
        values = emit(aten.expand.default, widened, full)
    one = _one_index(emit, x, layout)
    if one is not None:
        d, labels = one
        index = layout.indices[d]
        rows = shape[:d] + [value(index).numel()] + shape[d + 1 :]
        values = _to_rows(emit, values, labels, rows)
        return emit(aten.index_copy.default, x, d, _from_zero(emit, index, shape[d]), values)
    rows = _LinearRows.of(emit, node, x, layout)
    values = emit(aten.reshape.default, values, [math.prod(layout.shape), math.prod(layout.trailing)])
    flat = emit(aten.reshape.default, x, [rows.rows, math.prod(layout.trailing)])
    return emit(aten.reshape.default, emit(aten.index_copy.default, flat, 0, rows.index, values), shape)


def _select_rows(emit: Emitter, node: Node, x: Node, indices) -> Node:
    """x[indices] with several index tensors: index_select of x[..., index, ...] laid out as
    x[indices] when the others are slices in disguise (_one_index), else of the rows of x flattened
    to its rows at their linear indices (_LinearRows)."""
    layout, shape = _Layout.of(x, indices), _shape(x)
    one = _one_index(emit, x, layout)
    if one is not None:
        d, labels = one
        selected = emit(aten.index_select.default, x, d, _from_zero(emit, layout.indices[d], shape[d]))
        return _from_rows(emit, selected, labels, _shape(node))
    rows = _LinearRows.of(emit, node, x, layout)
    flat = emit(aten.reshape.default, x, [rows.rows, math.prod(layout.trailing)])
    return emit(aten.reshape.default, emit(aten.index_select.default, flat, 0, rows.index), _shape(node))
