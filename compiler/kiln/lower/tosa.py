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

from kiln import vocabulary
from kiln.errors import InternalError
from kiln.families import NpuFamily

# The families of lowerings: importing each registers its lowerings (kiln.lower.lowerer.LOWERINGS).
from kiln.lower import conv, elementwise, gather, movement, pool, reduce, resize, softmax  # noqa: F401
from kiln.lower.lowerer import LOWERINGS, Lowerer
from kiln.partition.partitioner import Partition


def check_vocabulary(lowerings: dict) -> None:
    """Raises InternalError unless `lowerings` (op -> its lowering) cover exactly the ops of
    kiln.vocabulary that have a lowering (LOWERED, which the partition stage puts on the NPU),
    each op's in the module its row names."""
    problems = []
    if set(lowerings) - vocabulary.LOWERED:
        problems.append(f"a lowering for {sorted(map(str, set(lowerings) - vocabulary.LOWERED))}, not in its row")
    if vocabulary.LOWERED - set(lowerings):
        problems.append(f"no lowering for {sorted(map(str, vocabulary.LOWERED - set(lowerings)))}, in its row")
    for row in (row for row in vocabulary.OPERATORS if row.lowering is not None):
        misplaced = sorted(
            str(op)
            for op in row.overloads
            if op in lowerings and lowerings[op].__module__ != f"kiln.lower.{row.lowering}"
        )
        if misplaced:
            problems.append(f"{misplaced} lowered outside kiln.lower.{row.lowering}, which its row names")
    if problems:
        raise InternalError("kiln.lower and kiln.vocabulary disagree: " + "; ".join(problems))


check_vocabulary(LOWERINGS)


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
