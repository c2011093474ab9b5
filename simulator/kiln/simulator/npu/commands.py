"""Command words and the decoding of a command stream, alike on both families; each family's
opcodes are its own CommandSet (kiln.simulator.npu.u55.commands, kiln.simulator.npu.u85.commands).

A command is one 32-bit word (cmd0: opcode in bits 9..0, a 16-bit parameter in bits
31..16) or, when bits 15..14 say a 32-bit payload follows (payload size 1), two words
(cmd1: the same header, then the payload). Register-setting commands (NPU_SET_*) store
their value; operation commands (NPU_OP_*) act on the stored values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import CommandError

PAYLOAD_SHIFT = 14
OPCODE_MASK = 0x3FF


@dataclass(frozen=True)
class CommandSet:
    """One NPU family's opcodes: cmd0 and cmd1 names by opcode."""

    family: str  # e.g. "Ethos-U55/U65", for messages
    cmd0_names: dict[int, str]
    cmd1_names: dict[int, str]


@dataclass(frozen=True)
class Command:
    index: int  # word offset of the header in the stream
    name: str  # the opcode's name in its CommandSet
    param: int  # bits 31..16 of the header
    payload: int | None  # the 32-bit payload of a cmd1, else None

    @property
    def is_operation(self) -> bool:
        return self.name.startswith("NPU_OP_")


def as_words(stream) -> np.ndarray:
    if isinstance(stream, (bytes, bytearray, memoryview)):
        raw = bytes(stream)
        if len(raw) % 4:
            raise CommandError(0, f"command stream of {len(raw)} bytes is not whole 32-bit words")
        return np.frombuffer(raw, dtype="<u4").astype(np.uint32)
    words = np.asarray(stream)
    if words.ndim != 1 or words.dtype.kind not in "ui":
        raise TypeError("a command stream is a 1-D array of 32-bit words or bytes")
    return words.astype(np.uint32)


def decode(words: np.ndarray, command_set: CommandSet):
    """Yields the commands of `words` (opcodes of `command_set`) in order; raises
    CommandError at the first word that is not a valid command (the commands before it
    have been yielded)."""
    cmd0_names, cmd1_names = command_set.cmd0_names, command_set.cmd1_names
    words = [int(w) for w in words]
    i = 0
    while i < len(words):
        header = words[i]
        opcode = header & OPCODE_MASK
        payload_size = (header >> PAYLOAD_SHIFT) & 3
        reserved = (header >> 10) & 0xF
        if reserved:
            raise CommandError(i, f"word {i} (0x{header:08x}): reserved bits 13..10 are not zero")
        if payload_size == 0:
            name = cmd0_names.get(opcode)
            if name is None:
                raise CommandError(i, f"word {i} (0x{header:08x}): unknown opcode 0x{opcode:03x}")
            yield Command(i, name, header >> 16, None)
            i += 1
        elif payload_size == 1:
            name = cmd1_names.get(opcode)
            if name is None:
                raise CommandError(i, f"word {i} (0x{header:08x}): unknown opcode 0x{opcode:03x} with payload")
            if i + 1 >= len(words):
                raise CommandError(i, f"word {i} (0x{header:08x}): {name} is missing its payload word")
            yield Command(i, name, header >> 16, words[i + 1])
            i += 2
        else:
            raise CommandError(i, f"word {i} (0x{header:08x}): unsupported payload size {payload_size}")
