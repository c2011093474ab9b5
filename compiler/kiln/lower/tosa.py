"""Lowers one NPU partition of kiln's graph to a TOSA 1.0 (INT profile) flatbuffer.

Layout contract: the TOSA graph's inputs and outputs have PyTorch's shapes and
element order (NCHW), so the program hands tensors to the delegate as they are;
inside, every rank-4 activation lives in NHWC, the layout TOSA's convolutions
and pools use, with a TRANSPOSE (or a RESHAPE where the two orders coincide)
at the edges and wherever a torch-order view is needed.

Integer semantics follow the PT2E reference: each quantized op's integer
result approximates quantize(op(dequantize(inputs))) with one rounding,
through TOSA RESCALE (single rounding) and CLAMP.
"""

from __future__ import annotations

from kiln.errors import InternalError
from kiln.families import NpuFamily
# The families of lowerings: importing each registers its lowerings (kiln.lower.lowerer.LOWERINGS).
from kiln.lower import conv, elementwise, gather, movement, pool, reduce, resize, softmax  # noqa: F401
from kiln.lower.elementwise import TABLE_FUNCTIONS
from kiln.lower.lowerer import LOWERINGS, Lowerer
from kiln.partition import vocabulary
from kiln.partition.partitioner import Partition


def check_vocabulary(lowered, tables) -> None:
    """The partition stage decides what reaches this stage from kiln.partition.vocabulary:
    raises InternalError unless the ops with a lowering (`lowered`) are exactly its LOWERED
    and the ops with a table function (`tables`) exactly its TABLE_OPS."""
    problems = []
    for what, ours, name in (("lowering", set(lowered), "LOWERED"), ("table function", set(tables), "TABLE_OPS")):
        theirs = getattr(vocabulary, name)
        if ours - theirs:
            problems.append(f"a {what} for {sorted(map(str, ours - theirs))}, not in vocabulary.{name}")
        if theirs - ours:
            problems.append(f"no {what} for {sorted(map(str, theirs - ours))}, in vocabulary.{name}")
    if problems:
        raise InternalError("kiln.lower.tosa and kiln.partition.vocabulary disagree: " + "; ".join(problems))


check_vocabulary(LOWERINGS, TABLE_FUNCTIONS)


def lower(partition: Partition, family: NpuFamily, flipped: frozenset[str] = frozenset()) -> bytes:
    """The partition as a TOSA 1.0 flatbuffer for an NPU of `family`; its inputs and outputs in the
    partition's order. `flipped` names choices (kiln.families.CHOICES) to take the other way from
    the family's first guess: the results are the same, Vela's estimate of them not."""
    return Lowerer(partition, family, flipped).lower()


def lower_noting_choices(partition: Partition, family: NpuFamily) -> tuple[bytes, frozenset[str]]:
    """lower()'s graph, and the choices the lowering met: flipping one of them gives another
    equivalent graph (kiln.compile.fastest compiles them)."""
    lowerer = Lowerer(partition, family)
    return lowerer.lower(), frozenset(lowerer.choices)
