"""Selects taken before the permute they read (a normalisation pass).

Attention written as model libraries write it splits q, k and v after one permute of all
three: ``qkv.reshape(B, N, 3, heads, d).permute(2, 0, 3, 1, 4)`` then ``qkv[0]``, ``qkv[1]``,
``qkv[2]`` (or ``unbind(0)``). Where that permute moves more than 4 axes in its smallest form
(reduced_permutation: with several windows or a batch, not with one sequence), the
permute read only by selects becomes, per select, the select of the permute's input along
the dim it reads, then a permute of what is left: the same values, the same elements moved
in all, by transposes of one rank less. Vela 5.2.0 crashes for Ethos-U55 and U65 on a 5-D
transpose read by a slice of its first dim and an elementwise op (tests/compiler/test_permutes.py
shows it), and Swin's window attention ran 11 % faster on Ethos-U85 with 4-D transposes; a
ViT's (one sequence: 4 axes already) ran 4-8 % slower with three transposes for its one, and
MobileViT's 10 % slower with its chunks (slices) taken first, so those keep their permute.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.fx import GraphModule, Node

from kiln.frontend.rewrite import Emitter, bound, finish, replace, value

aten = torch.ops.aten

PERMUTES = {aten.permute.default, aten.transpose.int}


def reduced_permutation(shape, perm) -> tuple[list[int], list[int]]:
    """(shape, perm) of the smallest transpose that moves the same elements as `perm` of `shape`:
    unit axes dropped, and axes next to each other in the input that stay next to each other in
    the output merged into one. E.g. [1, 50, 1, 3, 32] by (3, 1, 0, 2, 4) is [50, 3, 32] by (1, 0, 2)."""
    kept = [p for p in perm if shape[p] != 1]
    runs: list[list[int]] = []  # runs of input axes, in output order
    for p in kept:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # the runs in input order
    dims = [int(np.prod([shape[a] for a in runs[r]])) for r in order]
    return dims, [order.index(r) for r in range(len(runs))]


def _permutation(node: Node) -> list[int]:
    """The source dim of each dim of the permute or transpose `node`."""
    rank = value(node).dim()
    a = bound(node)
    if node.target is aten.permute.default:
        return [d % rank for d in a["dims"]]
    order = list(range(rank))
    first, second = a["dim0"] % rank, a["dim1"] % rank
    order[first], order[second] = order[second], order[first]
    return order


def _selected_first(emit: Emitter, select: Node, source: Node, order: list[int]) -> Node:
    """`select` (of the permute of `source` by `order`) as the select of `source`, then the
    permute of what is left."""
    a = bound(select)
    dim = order[a["dim"] % len(order)]
    taken = emit(aten.select.int, source, dim, a["index"])
    order = [d - (d > dim) for d in order if d != dim]
    if order == sorted(order):
        return taken
    return emit(aten.permute.default, taken, order)


MAX_AXES = 4  # the most axes a permute's smallest form may move and stay as it is


def selects_before_permutes(gm: GraphModule) -> int:
    """Each permute (or transpose) read only by selects of it whose smallest form moves more
    than MAX_AXES axes is replaced as the module's docstring says; returns how many permutes."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in PERMUTES or not node.users:
            continue
        readers = list(node.users)
        if not all(r.op == "call_function" and r.target is aten.select.int and r.args[0] is node for r in readers):
            continue
        order = _permutation(node)
        if len(reduced_permutation(list(value(node.args[0]).shape), order)[1]) <= MAX_AXES:
            continue
        for reader in readers:
            replace(reader, _selected_first(Emitter(gm, reader), reader, node.args[0], order))
        gm.graph.erase_node(node)
        count += 1
    return finish(gm, count)
