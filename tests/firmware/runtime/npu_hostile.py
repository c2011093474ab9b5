"""Hostile Ethos-U command streams made at test time by mutating a real Vela stream: the
regression set of the driver's bounds check (firmware/drivers/ethosu/bounds.cpp) and of
the NPU model's region limits (kiln.simulator.npu.context).

Each HOSTILE entry changes one register setting of the stream's first operation that uses
it, so that one access leaves its region's buffer (or names a region with no buffer, or
writes the read-only weights); it records which access that is, as both checks name it.
The word layout (opcode in bits 9..0, a payload word when bit 14 is set, an address
register = payload | parameter << 32) is the Ethos-U55/U65 command stream format, written
here from the register map, not imported from either checker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

OPCODE_MASK, PAYLOAD_FLAG = 0x3FF, 1 << 14
COP1_ACTION_CONFIG, COP1_ACTION_CMD_STREAM = 0x01, 0x02
NPU_OP_CONV, NPU_OP_DEPTHWISE, NPU_OP_POOL, NPU_OP_ELEMENTWISE, NPU_OP_DMA_START = 0x002, 0x003, 0x005, 0x006, 0x010
OPERATIONS = {NPU_OP_CONV, NPU_OP_DEPTHWISE, NPU_OP_POOL, NPU_OP_ELEMENTWISE, NPU_OP_DMA_START}
# one-word register commands
OFM_REGION, WEIGHT_REGION, DMA0_DST_REGION = 0x11F, 0x128, 0x131
# register commands with a payload word
IFM_BASE0, IFM_STRIDE_Y, OFM_BASE0 = 0x000, 0x005, 0x010
WEIGHT_BASE, WEIGHT_LENGTH, SCALE_BASE, DMA0_SRC, DMA0_DST, DMA0_LEN = 0x020, 0x021, 0x022, 0x030, 0x031, 0x032

# error codes (firmware/runtime/include/kiln/runtime/error.h)
OUTSIDE, NO_REGION, READ_ONLY = 0x531, 0x532, 0x533
TEXT = {
    OUTSIDE: "NPU stream accesses memory outside its region's buffer",
    NO_REGION: "NPU stream accesses a region with no buffer",
    READ_ONLY: "NPU stream writes the read-only weights region",
}


def stream_span(cmd: bytes) -> tuple[int, int]:
    """(first word, end word) of the command stream inside a COP1 payload."""
    words = np.frombuffer(cmd, "<u4")
    i = 1
    while i < len(words):
        tag = int(words[i])
        if tag & 0xFF == COP1_ACTION_CMD_STREAM:
            length = (((tag >> 8) & 0xFF) << 16) | (tag >> 16)
            return i + 1, i + 1 + length
        i += 3 if tag & 0xFF == COP1_ACTION_CONFIG else 1
    raise ValueError("no command stream in the COP1 payload")


def commands(words: np.ndarray, start: int, end: int):
    """Yields (word index, opcode, has a payload word) of each command."""
    i = start
    while i < end:
        w = int(words[i])
        payload = bool(w & PAYLOAD_FLAG)
        yield i, w & OPCODE_MASK, payload
        i += 2 if payload else 1


@dataclass(frozen=True)
class Hostile:
    name: str
    opcode: int  # the register command changed (its last setting before `before`)
    payload: bool  # whether that command has a payload word
    before: set[int]  # ... before the first operation of these kinds
    change: Callable  # (word, payload word or None, sizes) -> (word, payload word or None)
    code: int  # error code the driver reports
    access: str  # the access both checks name, e.g. "OFM write"


def _payload(value):
    return lambda word, payload, sizes: (word, value(sizes) & 0xFFFF_FFFF)


def _param(value):
    return lambda word, payload, sizes: ((word & 0xFFFF) | (value(sizes) << 16), payload)


BLOCK = {NPU_OP_CONV, NPU_OP_DEPTHWISE, NPU_OP_POOL, NPU_OP_ELEMENTWISE}
MAC = {NPU_OP_CONV, NPU_OP_DEPTHWISE}
HOSTILE = [
    # an OFM based at the last byte of the largest buffer: the write runs past its region's
    Hostile(
        "ofm_base_at_buffer_end", OFM_BASE0, True, BLOCK, _payload(lambda s: s["largest"] - 1), OUTSIDE, "OFM write"
    ),
    # an IFM 1 MiB past its start
    Hostile(
        "ifm_base_past_buffer",
        IFM_BASE0,
        True,
        BLOCK,
        _payload(lambda s: s["largest"] + (1 << 20)),
        OUTSIDE,
        "IFM read",
    ),
    # rows 64 KiB apart: the second row is far past the scratch
    Hostile("ifm_stride_y_huge", IFM_STRIDE_Y, True, {NPU_OP_CONV}, _payload(lambda s: 1 << 24), OUTSIDE, "IFM read"),
    # an OFM address with bits 47..32 set (parameter of OFM_BASE0)
    Hostile(
        "ofm_base_high_bits",
        OFM_BASE0,
        True,
        BLOCK,
        lambda w, p, s: ((w & 0xFFFF) | (1 << 16), p),
        OUTSIDE,
        "OFM write",
    ),
    # weights read past the .pte's weights
    Hostile(
        "weight_length_past_weights",
        WEIGHT_LENGTH,
        True,
        MAC,
        _payload(lambda s: s["weights"] + 16),
        OUTSIDE,
        "weight read",
    ),
    Hostile(
        "scale_base_at_weights_end", SCALE_BASE, True, MAC, _payload(lambda s: s["weights"]), OUTSIDE, "scale read"
    ),
    # the OFM in region 5, which has no buffer
    Hostile("ofm_region_without_buffer", OFM_REGION, False, BLOCK, _param(lambda s: 5), NO_REGION, "OFM write"),
    # the OFM written into the .pte's weights (region 0)
    Hostile("ofm_into_weights", OFM_REGION, False, BLOCK, _param(lambda s: 0), READ_ONLY, "OFM write"),
    # a DMA reading 1 MiB more than the weights hold
    # a DMA writing 1 MiB past every buffer (and the SHRAM, for a LUT)
    Hostile(
        "dma_destination_past_buffer",
        DMA0_DST,
        True,
        {NPU_OP_DMA_START},
        _payload(lambda s: s["largest"] + (1 << 20)),
        OUTSIDE,
        "DMA destination write",
    ),
    Hostile(
        "dma_length_past_source",
        DMA0_LEN,
        True,
        {NPU_OP_DMA_START},
        _payload(lambda s: s["weights"] + (1 << 20)),
        OUTSIDE,
        "DMA source read",
    ),
]


def sizes(weights: int, scratch: int, fast: int) -> dict[str, int]:
    """The buffer sizes a mutation is made against (bytes of regions 0, 1, 2)."""
    return {"weights": weights, "scratch": scratch, "fast": fast, "largest": max(weights, scratch, fast)}


def mutate(cmd: bytes, hostile: Hostile, sizes: dict[str, int]) -> bytes | None:
    """`cmd` (a COP1 payload) with `hostile`'s change applied to the last setting of its
    register before the first operation of its kinds, or None when the stream has none."""
    words = np.frombuffer(cmd, "<u4").copy()
    start, end = stream_span(cmd)
    last = None
    for i, opcode, payload in commands(words, start, end):
        if payload == hostile.payload and opcode == hostile.opcode:
            last = i
        elif not payload and opcode in OPERATIONS and opcode in hostile.before:
            if last is None:
                return None
            word, value = hostile.change(int(words[last]), int(words[last + 1]) if hostile.payload else None, sizes)
            words[last] = word
            if hostile.payload:
                words[last + 1] = value
            return words.tobytes()
    return None
