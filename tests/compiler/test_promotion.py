"""kiln.program.promotion: the dtype an elementwise CPU op computes in, as PyTorch's type promotion
gives it (values worked out from PyTorch's rules: a dimensioned tensor's category wins over a 0-d
tensor's and a number's of the same category, a higher category wins), and the op reading its
operands converted to it."""

from __future__ import annotations

import pytest
import torch

from kiln.graph import Op, QParams, Value
from kiln.program import promotion

aten = torch.ops.aten


def _v(dtype, shape=(2, 3), quantized=False):
    return Value(f"v_{dtype}", shape, dtype, QParams(0.1) if quantized else None)


@pytest.mark.parametrize(
    "target, args, out, want",
    [
        (aten.sigmoid.default, (_v("int8"),), "float32", "float32"),
        (aten.div.Tensor, (_v("int64"), _v("int64")), "float32", "float32"),
        (aten.clamp.default, (_v("bool"), -3, 3), "int64", "int64"),
        (aten.eq.Scalar, (_v("bool"), 2), "bool", "int64"),  # an int number lifts bool to the default int
        (aten.eq.Scalar, (_v("int8"), 2), "bool", "int8"),  # a number of the same category does not
        (aten.lt.Tensor, (_v("int8"), _v("int64", ())), "bool", "int8"),  # nor does a 0-d tensor
        (aten.lt.Tensor, (_v("int8"), _v("float32", ())), "bool", "float32"),  # of a higher one it does
        (aten.gt.Tensor, (_v("int16"), _v("int64")), "bool", "int64"),
        (aten.logical_and.default, (_v("int16"), _v("float32")), "bool", "bool"),  # read as x != 0
        (aten.where.self, (_v("bool"), _v("int8"), _v("float32")), "float32", "float32"),
    ],
)
def test_computation_dtype(target, args, out, want):
    assert promotion.computation_dtype(Op("node", target, args, {}, [_v(out)])) == want


def test_promoted_op_reads_converted_operands():
    cond, x, y = _v("bool"), _v("int8"), _v("float32")
    op = Op("node", aten.where.self, (cond, x, y), {}, [_v("float32")])
    promoted, conversions = promotion.promoted(op)
    ((source, converted),) = conversions
    assert source is x and converted.dtype == "float32" and converted.shape == x.shape
    assert promoted.args == (cond, converted, y) and promoted.outputs is op.outputs


def test_nothing_to_convert_or_not_elementwise_is_none():
    assert promotion.promoted(Op("node", aten.add.Tensor, (_v("int8"), _v("int8")), {}, [_v("int8")])) is None
    assert promotion.promoted(Op("node", aten.sum.dim_IntList, (_v("int8"), [1]), {}, [_v("int64")])) is None


def test_a_quantized_operand_is_never_converted():
    """The builder dequantizes a quantized operand to float32; converting its integers to bool
    would read the integers, not the values."""
    op = Op("node", aten.logical_and.default, (_v("int8", quantized=True), _v("bool")), {}, [_v("bool")])
    assert promotion.promoted(op) is None
