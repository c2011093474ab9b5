"""Attention as PyTorch writes it, decomposed into ops kiln lowers (matmul, mul, where, add, softmax).

Registered in kiln.frontend.decompose's COMPOSITES table (so OPS.md lists them) when
kiln.frontend.normalize imports this module.

A boolean mask selects MASK_FILL (the most negative float32) for the positions it masks, where
PyTorch adds -inf: exp(MASK_FILL - m) is 0 in float32 for any finite m, so the float result is
PyTorch's, and a row with every position masked gets a uniform softmax instead of NaN. A constant
mask's select becomes an add of a constant (0 where kept, the fill where masked), which every NPU
family runs (Ethos-U55 and U65 do not select).

The quantizer's observers do not observe mask fills (values at or below MASKED_BELOW) as values:
a tensor holding them has the range of its other values and a margin below, so a masked position
quantizes to the lowest level, which the softmax weighs at less than half an output step
(kiln.frontend.quantizer.MaskAwareHistogramObserver).
"""

from __future__ import annotations

import math

import torch
from torch.fx import Node

from kiln.errors import ModelError
from kiln.frontend.decompose import _shape, decomposes
from kiln.frontend.rewrite import Emitter, attribute, op_type, value

aten = torch.ops.aten

MASK_FILL = torch.finfo(torch.float32).min  # a masked position's score
# A value at or below this is an attention mask's fill, never a measured activation: MASK_FILL,
# -inf, or -1e9 as models write them, plus a score.
MASKED_BELOW = -1e8


def _where(node: Node) -> str:
    return f"node {node.name} ({op_type(node)})"


def repeat_heads(emit: Emitter, x: Node, groups: int) -> Node:
    """x [..., H, S, E] with each head repeated `groups` times in place: [..., H * groups, S, E]
    (repeat_interleave along dim -3), as unsqueeze, expand, reshape."""
    if groups == 1:
        return x
    *batch, heads, length, width = _shape(x)
    expanded = emit(aten.expand.default, emit(aten.unsqueeze.default, x, -3), [*batch, heads, groups, length, width])
    return emit(aten.reshape.default, expanded, [*batch, heads * groups, length, width])


def masked_scores(emit: Emitter, scores: Node, mask: Node | None) -> Node:
    """Scores with an attention mask applied: a bool mask keeps its True positions and sets the
    others to MASK_FILL (a select); a float mask is added."""
    if mask is None:
        return scores
    if value(mask).dtype == torch.bool:
        fill = emit.constant(torch.tensor(MASK_FILL, dtype=value(scores).dtype), "mask_fill")
        return emit(aten.where.self, mask, scores, fill)
    return emit(aten.add.Tensor, scores, mask)


@decomposes(
    aten.masked_fill.Scalar, aten.masked_fill.Tensor, into="where.self(mask, value, x), the value a 0-d constant"
)
def masked_fill(emit, node, a):
    """x with value where mask is True: where(mask, value, x)."""
    fill = a["value"]
    if not isinstance(fill, Node):
        fill = emit.constant(torch.tensor(fill, dtype=value(a["self"]).dtype), "value")
    return emit(aten.where.self, a["mask"], fill, a["self"])


def _mask_fill(gm, node) -> float | None:
    """The value of a one-element constant `node` if it is a mask fill, else None."""
    tensor = attribute(gm, node)
    if tensor is None or tensor.numel() != 1 or not tensor.is_floating_point() or float(tensor) > MASKED_BELOW:
        return None
    return float(tensor)


@decomposes(
    aten.where.self,
    into="a constant bool condition choosing between x and a mask fill (<= -1e8, e.g. -inf): add of a constant, "
    "0 where x is chosen and the fill elsewhere (every NPU family adds; Ethos-U55 and U65 do not select); else kept",
)
def constant_mask(emit, node, a):
    """where(c, x, fill) = x + where(c, 0, fill) for a constant condition c and a mask fill (and
    where(c, fill, x) with ~c): exp of either is 0 at the masked positions, and a softmax after it
    gives the same result."""
    condition = attribute(emit.gm, a["condition"])
    if condition is None or condition.dtype != torch.bool or not value(node).is_floating_point():
        return None
    for x, fill, chosen in ((a["self"], a["other"], condition), (a["other"], a["self"], ~condition)):
        level = _mask_fill(emit.gm, fill)
        if level is not None and isinstance(x, Node) and value(x).dtype == value(node).dtype:
            additive = torch.zeros(chosen.shape, dtype=value(node).dtype).masked_fill(~chosen, level)
            return emit(aten.add.Tensor, x, emit.constant(additive, "mask"))
    return None


@decomposes(
    aten.scaled_dot_product_attention.default,
    into="softmax(q @ k^T * scale + mask) @ v: keys and values repeated over the query groups (enable_gqa), "
    "matmul, mul, where (bool mask: masked positions get the most negative float) or add (float mask), "
    "softmax, matmul; is_causal: a constant lower-triangular bool mask; dropout_p > 0 refused",
)
def scaled_dot_product_attention(emit, node, a):
    """softmax(q @ k^T * scale + M) @ v, with q [..., Hq, L, E], k [..., Hk, S, E], v [..., Hk, S, Ev].

    scale defaults to 1 / sqrt(E). M is the attention mask: a bool mask (True: attend) gives 0 or
    MASK_FILL, a float mask is added as it is; is_causal gives the bool mask tril(ones(L, S)).
    enable_gqa with Hq = g * Hk repeats each key and value head g times (repeat_interleave on dim
    -3). dropout_p must be 0 (inference)."""
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if a["dropout_p"]:
        raise ModelError(
            f"{_where(node)}: attention dropout {a['dropout_p']} is random; kiln compiles inference: "
            "pass dropout_p=0.0 (e.g. dropout_p=self.dropout if self.training else 0.0)"
        )
    if a["is_causal"] and mask is not None:
        raise ModelError(f"{_where(node)}: an explicit attn_mask and is_causal=True cannot both be set")
    width, length, source = _shape(q)[-1], _shape(q)[-2], _shape(k)[-2]
    if a["enable_gqa"] and _shape(q)[-3] != _shape(k)[-3]:
        groups = _shape(q)[-3] // _shape(k)[-3]
        k, v = repeat_heads(emit, k, groups), repeat_heads(emit, v, groups)
    scale = a["scale"] if a["scale"] is not None else 1 / math.sqrt(width)
    scores = emit(aten.mul.Tensor, emit(aten.matmul.default, q, emit(aten.transpose.int, k, -2, -1)), scale)
    if a["is_causal"]:
        mask = emit.constant(torch.ones(length, source, dtype=torch.bool).tril(), "causal_mask")
    weights = emit(aten.softmax.int, masked_scores(emit, scores, mask), -1)
    return emit(aten.matmul.default, weights, v)
