"""The CPU kernels a kiln program may call, with ExecuTorch's operator names.

One module per family (quantize, nn, elementwise, reduce, movement), each a KERNELS dict
from the graph op's aten overload to its Kernel (kiln.program.kernels.core says what a
kernel promises); KERNELS here is their union, and by_name() indexes every kernel the
runtime has by the (operator, overload) a .pte names.
"""

from __future__ import annotations

from kiln.program.kernels import elementwise, movement, nn, quantize, reduce
from kiln.program.kernels.core import Derived, Fixed, Kernel, cpp_function

FAMILIES = (quantize, nn, elementwise, reduce, movement)

KERNELS: dict[object, Kernel] = {}
for _family in FAMILIES:
    _clash = KERNELS.keys() & _family.KERNELS.keys()
    assert not _clash, f"{_family.__name__} redefines kernels for {_clash}"
    KERNELS.update(_family.KERNELS)

# Kernels kiln's compiler never calls but other programs (ExecuTorch's) do.
FOREIGN_KERNELS = quantize.FOREIGN_KERNELS


def by_name() -> dict[tuple[str, str], Kernel]:
    """Kernels by (operator name, overload), as a .pte names them."""
    return {(k.name, k.overload): k for k in (*KERNELS.values(), *FOREIGN_KERNELS)}


__all__ = ["KERNELS", "FOREIGN_KERNELS", "Kernel", "Fixed", "Derived", "by_name", "cpp_function"]
