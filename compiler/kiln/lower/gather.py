"""Gathers: embedding and index_select by indices checked on the CPU."""

from __future__ import annotations

import numpy as np
import torch

from kiln.graph import Op
from kiln.lower.lowerer import Lowerer, attr, lowering, same_quantization

aten = torch.ops.aten


@lowering(aten.embedding.default, aten.index_select.default)
def _gather(lw: Lowerer, op: Op):
    """One GATHER of a [1, K, C] table by [1, W] int32 indices: embedding's rows, or index_select's
    entries along a dim with only size-1 dims before it (a support rule). The indices come checked
    against K and narrowed on the CPU (kiln.vocabulary.CHECKED_INDEX), so the NPU reads no row past the
    table; the result is the table's integers, requantized once if the output's quantization differs."""
    values, index = op.inputs[0], op.inputs[1]
    out = op.output
    dim = 0 if op.target is aten.embedding.default else op.arg("dim") % len(values.shape)
    k, c = values.shape[dim], int(np.prod(values.shape[dim + 1 :], dtype=np.int64))
    w = int(np.prod(index.shape, dtype=np.int64))

    def as_shape(name: str, shape, want, dtype: str) -> str:  # a RESHAPE only where the shape changes
        return name if list(shape) == list(want) else lw.reshape(name, want, dtype)

    if values.is_constant:
        table = lw.const(values.data.reshape(1, k, c), values.dtype, "table")
    else:
        table = as_shape(lw.torch_order(values), values.shape, [1, k, c], values.dtype)
    indices = (
        lw.const(index.data.reshape(1, w), "int32", "indices")
        if index.is_constant
        else as_shape(lw.torch_order(index), index.shape, [1, w], "int32")
    )
    gathered = lw.inter([1, w, c], values.dtype)
    lw.emit("GATHER", [table, indices], [gathered], attr("Gather"))
    name = as_shape(gathered, [1, w, c], out.shape, values.dtype)
    lw.result(out, same_quantization(lw, name, out.shape, values, out), False)
