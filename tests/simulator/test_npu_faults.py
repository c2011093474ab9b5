"""Faults: a command the NPU cannot parse and an access outside mapped memory stop the
stream with the fault the hardware reports; outputs written before stay written."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.simulator.npu import FlatMemory, MemoryFault, run_stream
from kiln.simulator.npu.config import config_for
from tests.simulator.npu_streams import Stream

BASES = (0x1000, 0x8000, 0, 0, 0, 0, 0, 0)
CONFIG = config_for("ethos-u55-128")


def _copy(stream: Stream, src: int, dst: int, length: int) -> Stream:
    """A 1-D DMA of `length` bytes from region 1 offset src to region 1 offset dst."""
    stream.set("DMA0_SRC_REGION", 1).set1("DMA0_SRC", src).set("DMA0_DST_REGION", 1).set1("DMA0_DST", dst)
    return stream.set1("DMA0_LEN", length).op("DMA_START").op("DMA_WAIT")


def _pool(stream: Stream) -> Stream:
    """`stream` (its IFM and OFM set) then a 1x1 int8 pooling of them."""
    stream.set("KERNEL_WIDTH_M1", 0).set("KERNEL_HEIGHT_M1", 0).set("ACTIVATION_MIN", 0xFF80).set(
        "ACTIVATION_MAX", 0x7F
    )
    return stream.set1("OFM_SCALE", 1, 0).set("OFM_PRECISION", 1 | (1 << 8)).op("POOL", 0)


def _memory():
    scratch = bytearray(range(64))
    return scratch, FlatMemory({0x1000: bytearray(16), 0x8000: scratch})


def test_unknown_opcode_is_a_parse_error_and_earlier_output_stays():
    scratch, memory = _memory()
    stream = _copy(Stream(), 0, 32, 8)
    bad_index = len(stream.words)
    stream.words.append(0x0000_0007)  # no such cmd0 opcode
    _copy(stream, 8, 48, 8).op("STOP", 0xFFFF)
    result = run_stream(stream.array(), BASES, memory, CONFIG)
    assert result.fault is not None
    assert result.fault.kind == "cmd_parse_error"
    assert result.fault.command_index == bad_index
    assert "0x007" in result.fault.message
    assert scratch[32:40] == bytes(range(8))  # the first copy happened
    assert scratch[48:56] == bytes(range(48, 56))  # the second did not


def test_read_outside_memory_is_a_bus_error():
    scratch, memory = _memory()
    stream = _copy(Stream(), 0, 32, 4)
    start = len(stream.words)
    _copy(stream, 60, 0, 8)  # reads 0x803c..0x8044: past the end of the 64-byte scratch
    result = run_stream(stream.array(), BASES, memory, CONFIG)
    assert result.fault.kind == "bus_error"
    dma_start = start + 8  # SRC_REGION, SRC (2), DST_REGION, DST (2), LEN (2), then DMA_START
    assert result.fault.command_index == dma_start
    assert "outside mapped memory" in result.fault.message
    assert scratch[32:36] == bytes(range(4))


def test_write_outside_memory_is_a_bus_error():
    scratch, memory = _memory()
    stream = _pool(Stream().feature_map("IFM", 1, 0, 2, 2, 4).feature_map("OFM", 1, 62, 2, 2, 4))
    result = run_stream(stream.array(), BASES, memory, CONFIG)
    assert result.fault.kind == "bus_error"
    assert "write of" in result.fault.message


def test_flat_memory_contract():
    memory = FlatMemory()
    buf = bytearray(8)
    memory.add(0x100, buf)
    memory.write(0x104, b"\x01\x02")
    assert buf == bytearray([0, 0, 0, 0, 1, 2, 0, 0])
    assert bytes(memory.read(0x103, 3)) == b"\x00\x01\x02"
    with pytest.raises(MemoryFault):
        memory.read(0x106, 4)
    with pytest.raises(MemoryFault):
        memory.write(0xFF, b"\x00")
    with pytest.raises(ValueError, match="overlaps"):
        memory.add(0x104, bytearray(8))


def test_bad_basep():
    with pytest.raises(ValueError, match="the NPU has 8"):
        run_stream(np.zeros(1, np.uint32), (0, 0), FlatMemory(), CONFIG)


def test_a_window_past_the_models_bound_is_refused_before_it_is_made():
    """A 65536 x 65536 pooling (what the registers allow; the window's mask alone would be
    4 GiB) stops at its command with a parse error naming the bound, nothing allocated."""
    scratch, memory = _memory()
    stream = _pool(Stream().feature_map("IFM", 1, 0, 65536, 65536, 1).feature_map("OFM", 1, 32, 65536, 65536, 1))
    result = run_stream(stream.array(), BASES, memory, CONFIG)
    assert result.fault.kind == "cmd_parse_error"
    assert "65536 x 65536 positions is more than the model runs (67,108,864 at most)" in result.fault.message
