"""What every CPU kernel module shares: the Kernel record and helpers for exact float32.

A kernel names the operator as it appears in the .pte's operator table and defines its
semantics in numpy, float32 throughout and in a fixed evaluation order, so that
`kiln run-host` and the firmware's C++ kernels (firmware/runtime/kernels/) compute the same
bits. Arguments follow the operator's schema; out-variant kernels take the output tensor
last (the program lists it once more as the returned value); one with several outputs
(Kernel.outputs) takes its out tensors last, then one TensorList of them. The C++ function of operator
"ns::name" overload "ov" is kiln::runtime::kernels::<name without leading _>_<ov in lower case>
(cpp_function; "ns_" before it for a namespace other than aten), which the firmware's kernel
table generator relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kiln.pte.schema import NUMPY_DTYPES, ScalarType


@dataclass(frozen=True)
class Kernel:
    name: str  # "cortex_m::quantize_per_tensor"
    overload: str  # "out"
    # The operator's arguments before the out tensor: the name of the graph op's argument,
    # or Fixed(value) where the kernel's schema has an argument the graph op lacks.
    schema_args: tuple
    run: Callable  # (*args) -> np.ndarray, args as the schema lists them
    accepts: Callable = lambda op: True  # (graph Op) -> whether `run` covers this call's arguments
    # run takes one more, last argument: the out tensor's numpy dtype (for operators whose
    # result type only the out tensor gives, as _to_copy.out).
    out_dtype: bool = False
    # How many out tensors the operator writes (sort, topk: values and indices). With more
    # than one, run returns a tuple of them, and a call lists the schema's arguments, then
    # each out tensor, then one TensorList of them as the returned value (ExecuTorch's emitter).
    outputs: int = 1


@dataclass(frozen=True)
class Fixed:
    value: object


@dataclass(frozen=True)
class Derived:
    """An argument the kernel's schema has, computed from the graph op."""

    of: Callable  # (graph Op) -> value


def argument(op, a):
    """The value of kernel schema argument `a` (a name, Fixed or Derived) for graph op `op`."""
    if isinstance(a, Fixed):
        return a.value
    if isinstance(a, Derived):
        return a.of(op)
    return op.arg(a)


def cpp_function(name: str, overload: str) -> str:
    """The C++ kernel's function name: ("aten::_softmax", "out") -> "softmax_out"; another
    namespace than aten's is its prefix: ("cortex_m::softmax", "out") -> "cortex_m_softmax_out"."""
    namespace, _, op = name.rpartition("::")
    prefix = "" if namespace in ("", "aten") else f"{namespace}_"
    return f"{prefix}{op.lstrip('_')}_{overload.lower()}"


def np_dtype(code: int) -> type:
    return NUMPY_DTYPES[ScalarType(code)]


def in_float64(fn):
    """float32 `fn` (exp, log, tanh) evaluated in float64 and rounded once, so the result is
    the correctly rounded one for all but vanishingly rare inputs on any C library (the
    firmware's kernels do the same; numpy's float32 versions are approximations)."""
    return lambda x: fn(np.asarray(x, np.float64)).astype(np.float32)


exp32, log32, tanh32 = in_float64(np.exp), in_float64(np.log), in_float64(np.tanh)


def binary(fn):
    return lambda a, b, *rest: fn(np.float32(a) if np.isscalar(a) else a, np.float32(b) if np.isscalar(b) else b)
