"""PyTorch's type promotion for the CPU's elementwise ops: the dtype an op computes in, and the
op reading its operands converted to it.

PyTorch converts the tensor operands of an elementwise op to one dtype before it computes
(TensorIterator's common dtype, torch.result_type of the operands and numbers), which is the
result's dtype except for comparisons (bool results). So sigmoid of an int8 tensor is sigmoid of
it converted to float32, an int tensor divided by an int tensor is a float32 division, a bool
tensor compared with 2 is compared as int64, an int8 tensor times a float32 one is a float32
product. A logical op reads each operand as x != 0, which is its conversion to bool: kiln's
logical kernels take bools, and an operand of another dtype is converted to bool.

kiln's kernels take operands of one dtype. The program builder asks `promoted` for a CPU op no
kernel takes as it is: the same op reading each operand whose dtype differs converted to the
computation dtype (a new Value, which the builder writes with aten::_to_copy, PyTorch's
conversion: integers to float32 rounded to nearest even, anything to bool as != 0, bool to 0 or
1, integers to integers modulo 2^bits), and the conversions. The conversions never go from
float to an integer type (a float operand makes the computation dtype float, or bool).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kiln import vocabulary
from kiln.graph import DTYPES, Op, Value
from kiln.program.kernels.elementwise import compute_dtype

K = vocabulary.Kind
# The elementwise ops, whose "self" and "other" operands PyTorch converts to one dtype (where's
# condition stays bool).
PROMOTING = vocabulary.of_kind(K.BINARY, K.DIV, K.MINMAX, K.ACTIVATION, K.UNARY, K.COMPARISON, K.LOGICAL, K.WHERE)
COMPARISONS = vocabulary.of_kind(K.COMPARISON)
LOGICAL = vocabulary.of_kind(K.LOGICAL)
OPERANDS = ("self", "other")
_TORCH = {name: dtype for dtype, name in DTYPES.items()}


def _operands(op: Op) -> list:
    names = {a.name for a in op.target._schema.arguments}
    return [op.arg(n) for n in OPERANDS if n in names]


def _meta(x):
    """An operand as torch.result_type takes it: a tensor of its dtype and rank, or the number."""
    return torch.empty(x.shape, dtype=_TORCH[compute_dtype(x)], device="meta") if isinstance(x, Value) else x


def computation_dtype(op: Op) -> str:
    """The dtype elementwise op `op` computes in: its result's; for a comparison
    torch.result_type of its operands; for a logical op bool."""
    if op.target in LOGICAL:
        return "bool"
    if op.target in COMPARISONS:
        first, other = _operands(op)
        return DTYPES[torch.result_type(_meta(first), _meta(other))]
    return compute_dtype(op.output)


def promoted(op: Op) -> tuple[Op, list[tuple[Value, Value]]] | None:
    """`op` reading its operands converted to its computation dtype, with the conversions
    (source, converted); None for an op that is not elementwise, whose operands all have it, or
    that would convert a quantized operand."""
    if op.target not in PROMOTING:
        return None
    dtype = computation_dtype(op)
    converted = {
        id(x): (x, Value(f"{x.name}_as_{dtype}", x.shape, dtype))
        for x in _operands(op)
        if isinstance(x, Value) and compute_dtype(x) != dtype
    }
    if not converted or any(source.qparams is not None for source, _ in converted.values()):
        return None  # a quantized operand is read as float32 (the builder dequantizes it), never converted

    def read(x):
        return converted[id(x)][1] if isinstance(x, Value) and id(x) in converted else x

    args = tuple(read(x) for x in op.args)
    kwargs = {name: read(x) for name, x in op.kwargs.items()}
    return replace(op, args=args, kwargs=kwargs), list(converted.values())
