"""Command words: Ethos-U55/U65 opcodes and the decoding of a command stream (the Ethos-U85's
opcodes are kiln.simulator.npu.u85.commands; decode takes either family's CommandSet).

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

# cmd0: the whole command is the header word.
CMD0 = {
    "NPU_OP_STOP": 0x000, "NPU_OP_IRQ": 0x001, "NPU_OP_CONV": 0x002, "NPU_OP_DEPTHWISE": 0x003,
    "NPU_OP_POOL": 0x005, "NPU_OP_ELEMENTWISE": 0x006, "NPU_OP_DMA_START": 0x010,
    "NPU_OP_DMA_WAIT": 0x011, "NPU_OP_KERNEL_WAIT": 0x012, "NPU_OP_PMU_MASK": 0x013,
    "IFM_PAD_TOP": 0x100, "IFM_PAD_LEFT": 0x101, "IFM_PAD_RIGHT": 0x102, "IFM_PAD_BOTTOM": 0x103,
    "IFM_DEPTH_M1": 0x104, "IFM_PRECISION": 0x105, "IFM_UPSCALE": 0x107, "IFM_ZERO_POINT": 0x109,
    "IFM_WIDTH0_M1": 0x10A, "IFM_HEIGHT0_M1": 0x10B, "IFM_HEIGHT1_M1": 0x10C, "IFM_IB_END": 0x10D,
    "IFM_REGION": 0x10F, "OFM_WIDTH_M1": 0x111, "OFM_HEIGHT_M1": 0x112, "OFM_DEPTH_M1": 0x113,
    "OFM_PRECISION": 0x114, "OFM_BLK_WIDTH_M1": 0x115, "OFM_BLK_HEIGHT_M1": 0x116,
    "OFM_BLK_DEPTH_M1": 0x117, "OFM_ZERO_POINT": 0x118, "OFM_WIDTH0_M1": 0x11A,
    "OFM_HEIGHT0_M1": 0x11B, "OFM_HEIGHT1_M1": 0x11C, "OFM_REGION": 0x11F,
    "KERNEL_WIDTH_M1": 0x120, "KERNEL_HEIGHT_M1": 0x121, "KERNEL_STRIDE": 0x122,
    "PARALLEL_MODE": 0x123, "ACC_FORMAT": 0x124, "ACTIVATION": 0x125, "ACTIVATION_MIN": 0x126,
    "ACTIVATION_MAX": 0x127, "WEIGHT_REGION": 0x128, "SCALE_REGION": 0x129, "AB_START": 0x12D,
    "BLOCKDEP": 0x12F, "DMA0_SRC_REGION": 0x130, "DMA0_DST_REGION": 0x131, "DMA0_SIZE0": 0x132,
    "DMA0_SIZE1": 0x133, "IFM2_BROADCAST": 0x180, "IFM2_SCALAR": 0x181, "IFM2_PRECISION": 0x185,
    "IFM2_ZERO_POINT": 0x189, "IFM2_WIDTH0_M1": 0x18A, "IFM2_HEIGHT0_M1": 0x18B,
    "IFM2_HEIGHT1_M1": 0x18C, "IFM2_IB_START": 0x18D, "IFM2_REGION": 0x18F,
}

# cmd1: header plus one 32-bit payload word.
CMD1 = {
    "IFM_BASE0": 0x000, "IFM_BASE1": 0x001, "IFM_BASE2": 0x002, "IFM_BASE3": 0x003,
    "IFM_STRIDE_X": 0x004, "IFM_STRIDE_Y": 0x005, "IFM_STRIDE_C": 0x006,
    "OFM_BASE0": 0x010, "OFM_BASE1": 0x011, "OFM_BASE2": 0x012, "OFM_BASE3": 0x013,
    "OFM_STRIDE_X": 0x014, "OFM_STRIDE_Y": 0x015, "OFM_STRIDE_C": 0x016,
    "WEIGHT_BASE": 0x020, "WEIGHT_LENGTH": 0x021, "SCALE_BASE": 0x022, "SCALE_LENGTH": 0x023,
    "OFM_SCALE": 0x024, "OPA_SCALE": 0x025, "OPB_SCALE": 0x026,
    "DMA0_SRC": 0x030, "DMA0_DST": 0x031, "DMA0_LEN": 0x032, "DMA0_SKIP0": 0x033, "DMA0_SKIP1": 0x034,
    "IFM2_BASE0": 0x080, "IFM2_BASE1": 0x081, "IFM2_BASE2": 0x082, "IFM2_BASE3": 0x083,
    "IFM2_STRIDE_X": 0x084, "IFM2_STRIDE_Y": 0x085, "IFM2_STRIDE_C": 0x086,
    "WEIGHT1_BASE": 0x090, "WEIGHT1_LENGTH": 0x091, "SCALE1_BASE": 0x092, "SCALE1_LENGTH": 0x093,
}

CMD0_NAMES = {code: name for name, code in CMD0.items()}
CMD1_NAMES = {code: name for name, code in CMD1.items()}
OPERATIONS = {name for name in CMD0 if name.startswith("NPU_OP_")}


@dataclass(frozen=True)
class CommandSet:
    """One NPU family's opcodes: cmd0 and cmd1 names by opcode."""

    family: str  # e.g. "Ethos-U55/U65", for messages
    cmd0_names: dict[int, str]
    cmd1_names: dict[int, str]


U55_COMMANDS = CommandSet("Ethos-U55/U65", CMD0_NAMES, CMD1_NAMES)


@dataclass(frozen=True)
class Command:
    index: int  # word offset of the header in the stream
    name: str  # a key of CMD0 or CMD1
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


def decode(words: np.ndarray, command_set: CommandSet = U55_COMMANDS):
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
