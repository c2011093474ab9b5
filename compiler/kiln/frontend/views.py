"""Updates through views made functional (normalize.functionalize_inplace's view half).

An in-place op that writes a view of a tensor (``mask[:, h0:h1, w0:w1] = label``,
``x[:, 0] += 1``, ``x.view(b, h, w, c)[:, ::2].zero_()``) updates its base: after it, the base
and every view of the base hold new values. kiln's graph has no aliasing, so the update
becomes values:

- the base's new value is the updated view put back into the base, one view op at a time
  from the view to the base (``put_back``): a slice becomes a slice_scatter, a select a
  select_scatter, a reshape (view, flatten, squeeze, ...) a reshape to the source's shape, a
  permute or transpose its inverse; an expand, as_strided, diagonal or unfold has no inverse
  and the update is a ModelError naming it;
- each view of the base taken before the update and read after it is taken again from the
  new base (``retaken``), so a later update through it, and every read, sees the new values.

The scatters are decomposed later (decompose.py: slice_scatter and select_scatter become a
cat of slices), or folded when the base is a constant (a mask built by slice assignment).
"""

from __future__ import annotations

import torch
from torch.fx import Node

from kiln.errors import ModelError
from kiln.frontend.rewrite import Emitter, bound, op_type, value

aten = torch.ops.aten

# view ops whose result holds every element of the source, in another shape: put back by a reshape
RESHAPES = {
    aten.view.default,
    aten.reshape.default,
    aten._unsafe_view.default,
    aten.flatten.using_ints,
    aten.unflatten.int,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.unsqueeze.default,
    aten.view_as.default,
    aten.reshape_as.default,
}
PERMUTES = {aten.permute.default, aten.transpose.int, aten.t.default}
SAME = {aten.alias.default, aten.detach.default}
SCATTERS = {aten.slice.Tensor, aten.select.int, aten.narrow.default}
INVERTIBLE = RESHAPES | PERMUTES | SAME | SCATTERS


def _shape(node) -> list[int]:
    return list(value(node).shape)


def _permutation(view: Node, a: dict) -> list[int]:
    rank = len(_shape(view))
    if view.target is aten.permute.default:
        return [d % rank for d in a["dims"]]
    order = list(range(rank))
    first, second = (0, 1) if view.target is aten.t.default else (a["dim0"] % rank, a["dim1"] % rank)
    order[first], order[second] = order[second], order[first]
    return order


def _put_back_one(emit: Emitter, view: Node, updated: Node) -> Node:
    """The source of `view` (its first argument) with the elements `view` shows replaced by `updated`."""
    source, a = view.args[0], bound(view)
    if view.target in SAME:
        return updated
    if view.target in RESHAPES:
        return emit(aten.reshape.default, updated, _shape(source))
    if view.target in PERMUTES:
        order = _permutation(view, a)
        return emit(aten.permute.default, updated, sorted(range(len(order)), key=order.__getitem__))
    if view.target is aten.select.int:
        return emit(aten.select_scatter.default, source, updated, a["dim"], a["index"])
    if view.target is aten.narrow.default:
        start = a["start"]
        return emit(aten.slice_scatter.default, source, updated, a["dim"], start, start + a["length"])
    return emit(aten.slice_scatter.default, source, updated, a["dim"], a["start"], a["end"], a["step"])


def put_back(emit: Emitter, written: Node, base: Node, updated: Node, where: str) -> Node:
    """`base`'s value after the view `written` of it (a chain of view ops) took the value `updated`.
    A view op kiln cannot invert is a ModelError naming it and `where` (the updating op)."""
    while written is not base:
        if written.target not in INVERTIBLE:
            raise ModelError(
                f"{where} updates {written.name} ({op_type(written)}), a view of {base.name} that is read "
                f"afterwards; kiln cannot put an update through {op_type(written)} back into {base.name}: "
                "compute the new tensor instead (e.g. torch.cat)"
            )
        updated, written = _put_back_one(emit, written, updated), written.args[0]
    return updated


def retaken(emit: Emitter, view: Node, taken: dict[Node, Node]) -> Node:
    """`view` (a chain of view ops on a base) taken again from the nodes `taken` maps its
    sources to (the base to its new value); each view taken again is added to `taken`."""
    if view not in taken:
        source = retaken(emit, view.args[0], taken)
        taken[view] = emit(view.target, source, *view.args[1:], **view.kwargs)
    return taken[view]
