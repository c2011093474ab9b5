"""Gathers and scatters by indices checked on the CPU: embedding and index_select (TOSA GATHER),
index_copy (TOSA SCATTER); on the Ethos-U85 both are the DMA's indexed mode."""

from __future__ import annotations

import numpy as np
import torch

from kiln.graph import Op
from kiln.lower.lowerer import Lowerer, attr, lowering, same_quantization

aten = torch.ops.aten


def _as_shape(lw: Lowerer, name: str, shape, want, dtype: str) -> str:
    """`name` as shape `want`: a RESHAPE only where the shape changes."""
    return name if list(shape) == list(want) else lw.reshape(name, want, dtype)


def _groups(shape, dim: int) -> tuple[int, int, int]:
    """(before, size, after): the elements of dims before `dim`, its size, those after it."""
    return (
        int(np.prod(shape[:dim], dtype=np.int64)),
        shape[dim],
        int(np.prod(shape[dim + 1 :], dtype=np.int64)),
    )


@lowering(aten.embedding.default, aten.index_select.default)
def _gather(lw: Lowerer, op: Op):
    """One GATHER of a [1, K, C] table by [1, W] int32 indices: embedding's rows, or index_select's
    entries along a dim with only size-1 dims before it (a support rule). The indices come checked
    against K and narrowed on the CPU (kiln.vocabulary.CHECKED_INDEX), so the NPU reads no row past the
    table; the result is the table's integers, requantized once if the output's quantization differs."""
    values, index = op.inputs[0], op.inputs[1]
    out = op.output
    dim = 0 if op.target is aten.embedding.default else op.arg("dim") % len(values.shape)
    _, k, c = _groups(values.shape, dim)
    w = int(np.prod(index.shape, dtype=np.int64))
    if values.is_constant:
        table = lw.table(values, [1, k, c])
    else:
        table = _as_shape(lw, lw.torch_order(values), values.shape, [1, k, c], values.dtype)
    indices = (
        lw.const(index.data.reshape(1, w), "int32", "indices")
        if index.is_constant
        else _as_shape(lw, lw.torch_order(index), index.shape, [1, w], "int32")
    )
    gathered = lw.inter([1, w, c], values.dtype)
    lw.emit("GATHER", [table, indices], [gathered], attr("Gather"))
    name = _as_shape(lw, gathered, [1, w, c], out.shape, values.dtype)
    lw.result(out, same_quantization(lw, name, out.shape, values, out), False)


@lowering(aten.index_copy.default)
def _scatter(lw: Lowerer, op: Op):
    """index_copy(values, dim, index, source) as one SCATTER: values as [N, K, C] (N the elements of
    the dims before dim, K its size, C those after), source as [N, W, C], and the W indices,
    checked against K and narrowed on the CPU (kiln.vocabulary.CHECKED_INDEX) so that the NPU writes
    no row past values, broadcast to [N, W] (a constant as such). The result shares values'
    quantization (kiln's quantizer gives index_copy one range); an operand whose quantization differs
    is requantized to it first. Rows written twice are kept off the NPU (a support rule)."""
    values, index, source = op.arg("self"), op.arg("index"), op.arg("source")
    out = op.output
    dim = op.arg("dim") % len(values.shape)
    n, k, c = _groups(values.shape, dim)
    w = int(np.prod(index.shape, dtype=np.int64))
    table = same_quantization(lw, lw.torch_order(values), values.shape, values, out)
    rows = same_quantization(lw, lw.torch_order(source), source.shape, source, out)
    if index.is_constant:
        indices = lw.const(np.tile(index.data.reshape(1, w), (n, 1)), "int32", "indices")
    else:
        indices = _as_shape(lw, lw.torch_order(index), index.shape, [1, w], "int32")
        if n > 1:  # an int32 ADD of [N, 1] zeros: Vela 5.2.0 estimates it at 2 NPU cycles, a TILE at 438
            broadcast = lw.inter([n, w], "int32")
            lw.emit("ADD", [indices, lw.const(np.zeros((n, 1)), "int32", "zeros")], [broadcast], attr("Add"))
            indices = broadcast
    scattered = lw.inter([n, k, c], out.dtype)
    lw.emit(
        "SCATTER",
        [
            _as_shape(lw, table, values.shape, [n, k, c], out.dtype),
            indices,
            _as_shape(lw, rows, source.shape, [n, w, c], out.dtype),
        ],
        [scattered],
        attr("Scatter"),
    )
    lw.result(out, _as_shape(lw, scattered, [n, k, c], out.shape, out.dtype), False)
