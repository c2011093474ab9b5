"""The CPU kernels a kiln program may call, with ExecuTorch's operator names.

One module per family (quantize, nn, elementwise, reduce, movement, sort), each a KERNELS dict
from the graph op's aten overload to its Kernel, or to a tuple of Kernels when the op's
arguments choose the operator (aten.pad's mode); kiln.program.kernels.core says what a
kernel promises. The ops of each family are those whose kiln.vocabulary row names it
(check_vocabulary, run when this package is imported). KERNELS here is their union,
kernel_for(op) picks an op's kernel, and by_name() indexes every kernel the runtime has by
the (operator, overload) a .pte names, the integer kernels of quantized ops
(kiln.program.kernels.integer) among them.
"""

from __future__ import annotations

from kiln import vocabulary
from kiln.errors import InternalError
from kiln.program.kernels import elementwise, integer, integer_s16, movement, nn, quantize, reduce, sort
from kiln.program.kernels.core import Derived, Fixed, Kernel, cpp_function

FAMILIES = (quantize, nn, elementwise, reduce, movement, sort)


def check_vocabulary(families) -> None:
    """Raises InternalError unless each family module's KERNELS are exactly the ops whose
    kiln.vocabulary row names that module."""
    problems = []
    for family in families:
        name = family.__name__.rpartition(".")[2]
        ours, theirs = set(family.KERNELS), vocabulary.kernels_in(name)
        if ours - theirs:
            problems.append(f"{name} has kernels for {sorted(map(str, ours - theirs))}, whose rows name no such kernel")
        if theirs - ours:
            problems.append(f"{name} has no kernel for {sorted(map(str, theirs - ours))}, whose rows name it")
    if problems:
        raise InternalError("kiln.program.kernels and kiln.vocabulary disagree: " + "; ".join(problems))


check_vocabulary(FAMILIES)
KERNELS: dict[object, Kernel] = {op: kernel for family in FAMILIES for op, kernel in family.KERNELS.items()}

# Kernels kiln's compiler never calls but other programs (ExecuTorch's) do.
FOREIGN_KERNELS = (*quantize.FOREIGN_KERNELS, *movement.FOREIGN_KERNELS)
# The integer kernels of quantized ops (kiln.program.kernels.integer and integer_s16), by operator
# name; the program builder calls them by name (kiln.program.integer_ops), not through a graph
# op's target.
INTEGER_KERNELS = {**integer.INTEGER_KERNELS, **integer_s16.KERNELS}


def kernel_for(op) -> Kernel | None:
    """The kernel for graph op `op`: the first of its target's kernels that accepts it."""
    found = KERNELS.get(op.target, ())
    return next((k for k in (found if isinstance(found, tuple) else (found,)) if k.accepts(op)), None)


def by_name() -> dict[tuple[str, str], Kernel]:
    """Kernels by (operator name, overload), as a .pte names them."""
    every = [k for found in KERNELS.values() for k in (found if isinstance(found, tuple) else (found,))]
    return {(k.name, k.overload): k for k in (*every, *FOREIGN_KERNELS, *INTEGER_KERNELS.values())}


__all__ = [
    "KERNELS",
    "FOREIGN_KERNELS",
    "INTEGER_KERNELS",
    "Kernel",
    "Fixed",
    "Derived",
    "by_name",
    "cpp_function",
    "kernel_for",
]
