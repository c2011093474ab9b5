"""Reductions along dims, cumulative sums and softmax (firmware/runtime/kernels/reduce.cpp).

Orders of evaluation, the same in the C++ kernels:
- sum and mean: each output starts at +0.0 and adds its inputs one at a time in row-major
  order of the reduced dims, in float32; mean then divides once by float32(count). sum of
  integers or bools: int64, wrapping modulo 2**64 (PyTorch's sum of them).
- amax/amin/argmax/argmin: the first extreme value in row-major order of the reduced dims
  wins; a NaN is more extreme than any number (the first NaN wins), as PyTorch's. amax and
  amin of integers or bools keep their type.
- any/all: of bool values (the frontend compares others with 0 first) over a non-empty dim
  list; any of no values is false, all of them true.
- cumsum: out[i] = out[i - 1] + x[i] along the dim, starting at +0.0 (int64 for integer
  and bool inputs, wrapping modulo 2**64).
- softmax: shifted = x - max, exp, the sum of the exps in index order; softmax divides by it,
  log_softmax subtracts its log.
Dims follow PyTorch: negative ones count from the end; a dim list of None or [] means every
dim; a dim named twice, or reducing an empty dim to an extreme value, is an error.
"""

from __future__ import annotations

import numpy as np
import torch

from kiln.errors import HostError
from kiln.program.kernels.core import Fixed, Kernel, exp32, log32

aten = torch.ops.aten

FLOAT = 6  # ScalarType codes of a kernel's dtype argument
LONG = 4
INTEGERS = ("int8", "int16", "int32", "int64")
WHOLE = (*INTEGERS, "bool")  # what sums to int64 and keeps its type in amax/amin


def float_operand(v) -> bool:
    """Whether the kernel sees graph value `v` as float32 (a quantized value is dequantized)."""
    return v.dtype == "float32" or v.qparams is not None


def float_operands(op) -> bool:
    return all(float_operand(v) for v in op.inputs)


def reduced_dims(dims, rank: int) -> tuple[int, ...]:
    """`dims` (None, an int or a list) as sorted non-negative dims; None or [] is every dim."""
    if dims is None:
        return tuple(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        return tuple(range(rank))
    span = max(rank, 1)  # a 0-d tensor takes dim 0 and -1, as PyTorch
    normal = []
    for d in dims:
        if not -span <= d < span:
            raise HostError(f"dimension {d} is out of range for a tensor of rank {rank}")
        normal.append(d % span)
    if len(set(normal)) != len(normal):
        raise HostError(f"a dimension appears twice in {list(dims)}")
    return tuple(sorted(d for d in normal if d < rank))


def _grouped(x: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """x with the kept dims first (in order) and the reduced dims flattened into the last
    axis in row-major order."""
    kept = [d for d in range(x.ndim) if d not in dims]
    moved = np.transpose(x, kept + list(dims))
    return moved.reshape(tuple(x.shape[d] for d in kept) + (-1,))


def _restore(result: np.ndarray, shape, dims, keepdim: bool) -> np.ndarray:
    if keepdim:
        return result.reshape(tuple(1 if d in dims else n for d, n in enumerate(shape)))
    return result.reshape(tuple(n for d, n in enumerate(shape) if d not in dims))


def sum_last(y: np.ndarray) -> np.ndarray:
    """Sum over the last axis from +0.0, one value at a time in index order, in float32
    (cumsum is sequential; its first partial is x[0] instead of 0 + x[0], which differs only
    in the sign of a zero, and adding +0.0 at the end removes that difference)."""
    if y.shape[-1] == 0:
        return np.zeros(y.shape[:-1], np.float32)
    return np.cumsum(y, axis=-1, dtype=np.float32)[..., -1] + np.float32(0)


def _sum(x, dim, keepdim, dtype, mean=False):
    exact = x.dtype.name in WHOLE and not mean  # integers and bools: an int64 sum
    if dtype not in (None, LONG if exact else FLOAT):
        raise HostError(f"sum/mean of {x.dtype} to scalar type {dtype} is not supported")
    dims = reduced_dims(dim, x.ndim)
    grouped = _grouped(x, dims)
    total = grouped.astype(np.int64).sum(-1, dtype=np.int64) if exact else sum_last(grouped)
    if mean:
        total = (total / np.float32(grouped.shape[-1])).astype(np.float32)
    return _restore(total, x.shape, dims, keepdim)


def _first_extreme(y: np.ndarray, largest: bool) -> np.ndarray:
    """Index along the last axis of the first maximum (minimum), a NaN before any number
    (numpy's argmax/argmin return the first NaN, and the first of equal extremes)."""
    if y.shape[-1] == 0:
        raise HostError("cannot reduce an empty dimension to an extreme value")
    return (np.argmax if largest else np.argmin)(y, axis=-1)


def _extreme(x, dim, keepdim, largest):
    dims = reduced_dims(dim, x.ndim)
    grouped = _grouped(x, dims)
    index = _first_extreme(grouped, largest)
    values = np.take_along_axis(grouped, index[..., None], axis=-1)[..., 0]
    return _restore(values, x.shape, dims, keepdim)


def _any_all(x, dim, keepdim, every: bool):
    dims = reduced_dims(dim, x.ndim)
    grouped = _grouped(x != 0, dims)
    return _restore(grouped.all(-1) if every else grouped.any(-1), x.shape, dims, keepdim)


def _any_all_accepts(op) -> bool:
    """A bool tensor over a listed dim (any.dims' [] means no reduction in PyTorch, every dim here)."""
    (x,) = op.inputs
    return x.dtype == "bool" and bool(op.arg("dim"))


def _arg_extreme(x, dim, keepdim, largest):
    dims = reduced_dims(dim, x.ndim)
    index = _first_extreme(_grouped(x, dims), largest).astype(np.int64)
    if dim is None and not keepdim:
        return index.reshape(())
    return _restore(index, x.shape, dims, keepdim)


def _cumsum(x, dim, dtype):
    dim = reduced_dims(dim, x.ndim)[0] if x.ndim else 0
    if x.dtype == np.float32 and dtype in (None, FLOAT):
        result = np.cumsum(x, axis=dim, dtype=np.float32) + np.float32(0) if x.ndim else x + np.float32(0)
    elif x.dtype.name in WHOLE and dtype in (None, LONG):
        result = np.cumsum(x.astype(np.int64), axis=dim, dtype=np.int64) if x.ndim else x.astype(np.int64)
    else:
        raise HostError(f"cumsum of {x.dtype} to scalar type {dtype} is not supported")
    return result


def _softmax(x, dim, log):
    """Softmax along `dim`: the max subtracted, exp, the sum taken in index order."""
    dim = reduced_dims(dim, x.ndim)[0]
    shifted = (x - _extreme(x, [dim], True, largest=True)).astype(np.float32)
    exps = exp32(shifted)
    total = _sum(exps, [dim], True, None)
    return (shifted - log32(total) if log else exps / total).astype(np.float32)


def _dtype_is(*codes):
    """accepts: the op's dtype argument is None or one of `codes` (torch dtypes here)."""
    names = {FLOAT: torch.float32, LONG: torch.int64}
    return lambda op: op.arg("dtype") is None or op.arg("dtype") in {names[c] for c in codes}


def _float_sum(op) -> bool:
    return float_operands(op) and _dtype_is(FLOAT)(op)


def _sum_accepts(op) -> bool:
    """float32 (or quantized) values to float32, integers and bools to int64."""
    (x,) = op.inputs
    return _float_sum(op) or (x.qparams is None and x.dtype in WHOLE and _dtype_is(LONG)(op))


def _extreme_accepts(op) -> bool:
    """float32 (or quantized) values, or integers or bools kept in their type."""
    (x,) = op.inputs
    return float_operand(x) or x.dtype in WHOLE


def _cumsum_accepts(op) -> bool:
    (x,) = op.inputs
    if float_operand(x):
        return _dtype_is(FLOAT)(op)
    return x.dtype in WHOLE and _dtype_is(LONG)(op)


def _arg_accepts(op) -> bool:
    """float32 or integer values; a quantized input's integers order as its real values do."""
    (x,) = op.inputs
    return x.dtype in ("float32", *INTEGERS)


KERNELS: dict[object, Kernel] = {
    aten.sum.dim_IntList: Kernel("aten::sum", "IntList_out", ("self", "dim", "keepdim", "dtype"), _sum, _sum_accepts),
    aten.mean.dim: Kernel(
        "aten::mean",
        "out",
        ("self", "dim", "keepdim", "dtype"),
        lambda x, dim, keepdim, dtype: _sum(x, dim, keepdim, dtype, mean=True),
        _float_sum,
    ),
    aten.amax.default: Kernel(
        "aten::amax",
        "out",
        ("self", "dim", "keepdim"),
        lambda x, dim, keepdim: _extreme(x, dim, keepdim, largest=True),
        _extreme_accepts,
    ),
    aten.amin.default: Kernel(
        "aten::amin",
        "out",
        ("self", "dim", "keepdim"),
        lambda x, dim, keepdim: _extreme(x, dim, keepdim, largest=False),
        _extreme_accepts,
    ),
    aten.argmax.default: Kernel(
        "aten::argmax",
        "out",
        ("self", "dim", "keepdim"),
        lambda x, dim, keepdim: _arg_extreme(x, dim, keepdim, largest=True),
        _arg_accepts,
    ),
    aten.argmin.default: Kernel(
        "aten::argmin",
        "out",
        ("self", "dim", "keepdim"),
        lambda x, dim, keepdim: _arg_extreme(x, dim, keepdim, largest=False),
        _arg_accepts,
    ),
    aten.any.dims: Kernel(
        "aten::any",
        "dims_out",
        ("self", "dim", "keepdim"),
        lambda x, dim, keepdim: _any_all(x, dim, keepdim, every=False),
        _any_all_accepts,
    ),
    aten.all.dims: Kernel(
        "aten::all",
        "dims_out",
        ("self", "dim", "keepdim"),
        lambda x, dim, keepdim: _any_all(x, dim, keepdim, every=True),
        _any_all_accepts,
    ),
    aten.cumsum.default: Kernel("aten::cumsum", "out", ("self", "dim", "dtype"), _cumsum, _cumsum_accepts),
    **{
        t: Kernel(
            "aten::_softmax",
            "out",
            ("self", "dim", Fixed(False)),
            lambda x, dim, half: _softmax(x, dim, log=False),
            float_operands,
        )
        for t in (aten.softmax.int, aten._softmax.default)
    },
    **{
        t: Kernel(
            "aten::_log_softmax",
            "out",
            ("self", "dim", Fixed(False)),
            lambda x, dim, half: _softmax(x, dim, log=True),
            float_operands,
        )
        for t in (aten.log_softmax.int, aten._log_softmax.default)
    },
}
