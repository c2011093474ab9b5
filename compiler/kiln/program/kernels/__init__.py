"""The CPU kernels a kiln program may call, with ExecuTorch's operator names.

One module per family (quantize, nn, elementwise, reduce, movement, sort), each a KERNELS dict
from the graph op's aten overload to its Kernel, or to a tuple of Kernels when the op's
arguments choose the operator (aten.pad's mode); kiln.program.kernels.core says what a
kernel promises. KERNELS here is their union, kernel_for(op) picks an op's kernel, and
by_name() indexes every kernel the runtime has by the (operator, overload) a .pte names.
"""

from __future__ import annotations

from kiln.program.kernels import elementwise, movement, nn, quantize, reduce, sort
from kiln.program.kernels.core import Derived, Fixed, Kernel, cpp_function

FAMILIES = (quantize, nn, elementwise, reduce, movement, sort)

KERNELS: dict[object, Kernel] = {}
for _family in FAMILIES:
    _clash = KERNELS.keys() & _family.KERNELS.keys()
    assert not _clash, f"{_family.__name__} redefines kernels for {_clash}"
    KERNELS.update(_family.KERNELS)

# Kernels kiln's compiler never calls but other programs (ExecuTorch's) do.
FOREIGN_KERNELS = quantize.FOREIGN_KERNELS


def kernel_for(op) -> Kernel | None:
    """The kernel for graph op `op`: the first of its target's kernels that accepts it."""
    found = KERNELS.get(op.target, ())
    return next((k for k in (found if isinstance(found, tuple) else (found,)) if k.accepts(op)), None)


def by_name() -> dict[tuple[str, str], Kernel]:
    """Kernels by (operator name, overload), as a .pte names them."""
    every = [k for found in KERNELS.values() for k in (found if isinstance(found, tuple) else (found,))]
    return {(k.name, k.overload): k for k in (*every, *FOREIGN_KERNELS)}


__all__ = ["KERNELS", "FOREIGN_KERNELS", "Kernel", "Fixed", "Derived", "by_name", "cpp_function", "kernel_for"]
