"""einsum and repeat_interleave decomposed into permute, reshape, sum, expand and matmul.

Registered in kiln.frontend.decompose's COMPOSITES table (so OPS.md lists them) when
kiln.frontend.normalize imports this module.
"""

from __future__ import annotations

import math
import string

import torch
from torch.fx import Node

from kiln.frontend.decompose import _shape, decomposes
from kiln.frontend.rewrite import Emitter

aten = torch.ops.aten


@decomposes(
    aten.repeat_interleave.self_int,
    into="each element repeated along dim: unsqueeze after dim, expand, reshape (no dim: of the flattened tensor)",
)
def repeat_interleave(emit, node, a):
    """x with each element repeated `repeats` times in place along dim (x flattened if dim is None)."""
    x, repeats, dim = a["self"], a["repeats"], a["dim"]
    if dim is None:
        x, dim = emit(aten.reshape.default, x, [-1]), 0
    shape = _shape(x)
    dim %= len(shape)
    if repeats == 1:
        return x
    expanded = [*shape[: dim + 1], repeats, *shape[dim + 1 :]]
    y = emit(aten.expand.default, emit(aten.unsqueeze.default, x, dim + 1), expanded)
    return emit(aten.reshape.default, y, [*shape[:dim], shape[dim] * repeats, *shape[dim + 1 :]])


def _subscripts(equation: str, ranks: list[int]) -> tuple[list[str], str] | None:
    """The einsum equation's operand subscripts and output, "..." spelt out as capital letters
    (free in an equation of lower-case ones); None for an implicit output (no "->")."""
    if "->" not in equation:
        return None
    inputs, output = equation.replace(" ", "").split("->")
    operands = inputs.split(",")
    spelt = max((rank - len(s.replace("...", "")) for s, rank in zip(operands, ranks) if "..." in s), default=0)
    ellipsis = string.ascii_uppercase[:spelt]
    operands = [
        s.replace("...", ellipsis[spelt - (rank - len(s.replace("...", ""))) :]) if "..." in s else s
        for s, rank in zip(operands, ranks)
    ]
    return operands, output.replace("...", ellipsis)


def _arranged(emit: Emitter, x: Node, subscripts: str, order: str) -> Node:
    """x (labelled by `subscripts`) with the dims only it has and `order` lacks summed out, then
    permuted to `order`."""
    dropped = [i for i, s in enumerate(subscripts) if s not in order]
    if dropped:
        x = emit(aten.sum.dim_IntList, x, dropped, False)
        subscripts = "".join(s for s in subscripts if s in order)
    permutation = [subscripts.index(s) for s in order]
    return x if permutation == sorted(permutation) else emit(aten.permute.default, x, permutation)


def _sizes(subscripts: list[str], shapes: list[list[int]]) -> dict[str, int]:
    """The size of each label: the largest of the operands' (1 broadcasts)."""
    sizes: dict[str, int] = {}
    for labels, shape in zip(subscripts, shapes):
        for label, size in zip(labels, shape):
            sizes[label] = max(sizes.get(label, 1), size)
    return sizes


def _reshaped(emit: Emitter, x: Node, shape: list[int]) -> Node:
    return x if _shape(x) == shape else emit(aten.reshape.default, x, shape)


def _contracted(emit: Emitter, a: Node, b: Node, sa: str, sb: str, keep: str, sizes: dict) -> tuple[Node, str]:
    """a and b (labelled sa, sb) multiplied and summed over the labels they share that `keep`
    lacks: one matmul of [batch..., left, shared] by [batch..., shared, right]; returns the
    product and its labels (batch, left, right)."""
    batch = "".join(s for s in sa if s in sb and s in keep)
    shared = "".join(s for s in sa if s in sb and s not in keep)
    left = "".join(s for s in sa if s not in sb and s in keep)
    right = "".join(s for s in sb if s not in sa and s in keep)
    a = _arranged(emit, a, sa, batch + left + shared)
    b = _arranged(emit, b, sb, batch + shared + right)
    a_batch, b_batch = _shape(a)[: len(batch)], _shape(b)[: len(batch)]
    size = [sizes[s] for s in batch]

    def count(labels):
        return math.prod(sizes[s] for s in labels)

    a = _reshaped(emit, a, [*a_batch, count(left), count(shared)])
    b = _reshaped(emit, b, [*b_batch, count(shared), count(right)])
    product = emit(aten.matmul.default, a, b)
    product = _reshaped(emit, product, [*size, *(sizes[s] for s in left), *(sizes[s] for s in right)])
    return product, batch + left + right


@decomposes(
    aten.einsum.default,
    into="explicit output (->), no label repeated within an operand: per pair of operands, left to right, "
    "the labels only one operand has and the output lacks summed, permute, reshape, one matmul, reshape; "
    "then permute to the output's order; else kept",
)
def einsum(emit, node, a):
    """torch.einsum(equation, *operands) as pairwise contractions: operands x (labels sx) and y
    (sy) become z[batch, left, right] = sum over shared of x[batch, left, shared] * y[batch,
    shared, right], batch the labels both have and a later operand or the output needs."""
    operands = list(a["tensors"])
    parsed = _subscripts(a["equation"], [len(_shape(t)) for t in operands])
    if parsed is None:
        return None
    subscripts, output = parsed
    if any(len(set(s)) != len(s) for s in subscripts) or len(set(output)) != len(output):
        return None
    sizes = _sizes(subscripts, [_shape(t) for t in operands])
    x, sx = operands[0], subscripts[0]
    for i in range(1, len(operands)):
        keep = output + "".join(subscripts[i + 1 :])
        x, sx = _contracted(emit, x, operands[i], sx, subscripts[i], keep, sizes)
    return _arranged(emit, x, sx, output)
