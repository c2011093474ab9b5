"""The QEMU attachment's pieces that need no QEMU: the Thumb decoder (checked against
encodings the GNU assembler produces), IT-block stepping (worked out by hand from
the Armv8-M xPSR layout) and the gdb-backed memory's page cache (against a fake
target)."""

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from kiln.simulator import thumb
from kiln.simulator.attach import PAGE, QEMU_DDR_BASE, TargetMemory
from kiln.simulator.gdb import GdbError
from kiln.simulator.npu.memory import MemoryFault

# (assembly, load, rt, rn, offset, rm, shift, index, writeback, size)
CASES = [
    ("str r3, [r2, #8]", False, 3, 2, 8, None, 0, True, False, 2),
    ("ldr r0, [r1]", True, 0, 1, 0, None, 0, True, False, 2),
    ("ldr r5, [r6, #124]", True, 5, 6, 124, None, 0, True, False, 2),
    ("str r1, [r2, r3]", False, 1, 2, 0, 3, 0, True, False, 2),
    ("ldr r4, [r0, r7]", True, 4, 0, 0, 7, 0, True, False, 2),
    ("str.w r8, [r9, #0x1a0]", False, 8, 9, 0x1A0, None, 0, True, False, 4),
    ("ldr.w r11, [r12, #0xfc0]", True, 11, 12, 0xFC0, None, 0, True, False, 4),
    ("ldr r2, [r3, #-4]", True, 2, 3, -4, None, 0, True, False, 4),
    ("str r2, [r3, #4]!", False, 2, 3, 4, None, 0, True, True, 4),
    ("ldr r2, [r3], #-8", True, 2, 3, -8, None, 0, False, True, 4),
    ("ldr.w r1, [r2, r10, lsl #2]", True, 1, 2, 0, 10, 2, True, False, 4),
]


def assemble(source: str) -> list[int]:
    """Halfwords of one Thumb instruction, from arm-none-eabi-as and objcopy."""
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "a.s").write_text(f".syntax unified\n.thumb\n{source}\n")
        subprocess.run(["arm-none-eabi-as", "-march=armv8.1-m.main", str(d / "a.s"), "-o", str(d / "a.o")], check=True)
        subprocess.run(
            ["arm-none-eabi-objcopy", "-O", "binary", "-j", ".text", str(d / "a.o"), str(d / "a.bin")], check=True
        )
        code = (d / "a.bin").read_bytes()
    return [int.from_bytes(code[i : i + 2], "little") for i in range(0, len(code), 2)]


@pytest.mark.parametrize("source,load,rt,rn,offset,rm,shift,index,writeback,size", CASES)
def test_word_loads_and_stores_decode_as_assembled(source, load, rt, rn, offset, rm, shift, index, writeback, size):
    halfwords = assemble(source)
    assert len(halfwords) * 2 == size
    access = thumb.decode(*halfwords)
    assert (access.load, access.rt, access.rn, access.rm, access.index, access.writeback, access.size) == (
        load,
        rt,
        rn,
        rm,
        index,
        writeback,
        size,
    )
    if rm is None:
        assert access.offset == offset
    else:
        assert access.shift == shift


@pytest.mark.parametrize(
    "source",
    [
        "strd r2, r3, [r0]",
        "ldrd r2, r3, [r0, #8]",
        "stm r0!, {r1, r2}",
        "ldm r0, {r1, r2}",
        "strb r1, [r0]",
        "ldrh r1, [r0, #2]",
        "ldrb.w r1, [r0, #1]",
        "strh.w r1, [r0, #2]",
        "ldr r0, [sp, #4]",
        "push {r4, lr}",
    ],
)
def test_anything_but_a_word_access_is_refused(source):
    halfwords = assemble(source)
    with pytest.raises(thumb.UnsupportedAccess):
        thumb.decode(*halfwords[:2])


def test_addresses_and_writeback():
    registers = {2: 0x5810_2000, 3: 0x5810_2010, 10: 3}
    pre = thumb.decode(*assemble("str r2, [r3, #4]!"))
    assert pre.address(registers) == 0x5810_2014 and pre.base_after(registers) == 0x5810_2014
    post = thumb.decode(*assemble("ldr r2, [r3], #-8"))
    assert post.address(registers) == 0x5810_2010 and post.base_after(registers) == 0x5810_2008
    scaled = thumb.decode(*assemble("ldr.w r1, [r2, r10, lsl #2]"))
    assert scaled.address(registers) == 0x5810_200C


def test_it_block_state_advances():
    # ITSTATE = xPSR[15:10]:xPSR[26:25]. "ITT EQ" = firstcond 0000, mask 0100 -> ITSTATE 0x04:
    # bits 7..2 = 000001 -> xPSR bit 10; bits 1..0 = 00.
    xpsr = 0x0100_0000 | (1 << 10)
    after_first = thumb.advance_itstate(xpsr)
    # mask shifts left: ITSTATE 0x08 -> bits 7..2 = 000010 -> xPSR bit 11.
    assert after_first == 0x0100_0000 | (1 << 11)
    # After the second instruction (ITSTATE 0x08, low 3 bits 000) the block ends.
    assert thumb.advance_itstate(after_first) == 0x0100_0000
    assert thumb.advance_itstate(0x6100_0000) == 0x6100_0000  # outside an IT block: unchanged


class FakeGdb:
    """A target with memory at 0x3100_0000 (16 KiB); records what it was asked."""

    def __init__(self):
        self.sram = bytearray(np.arange(16384, dtype=np.uint32).astype(np.uint8).tobytes()[:16384])
        self.reads, self.writes, self.batches = [], [], []  # batches: the runs of each read_runs

    def read_memory(self, address, size):
        self.reads.append((address, size))
        offset = address - 0x3100_0000
        if offset < 0 or offset + size > len(self.sram):
            raise GdbError("E14")
        return bytes(self.sram[offset : offset + size])

    def read_runs(self, runs):
        """GdbClient.read_runs: each run's bytes, None for one the target refuses."""
        self.batches.append(len(runs))
        out = []
        for address, size in runs:
            try:
                out.append(self.read_memory(address, size))
            except GdbError:
                out.append(None)
        return out

    def memory_writes(self, address, data):
        """GdbClient.memory_writes, as (address, bytes) for the test to read."""
        return [(address, bytes(data))]

    def write_memory(self, address, data):
        self.writes.append((address, len(data)))
        offset = address - 0x3100_0000
        self.sram[offset : offset + len(data)] = bytes(data)


def memory(ddr=None):
    gdb = FakeGdb()
    return gdb, TargetMemory(gdb, [(0x3100_0000, 16384), (0x7000_0000, 0x1000)], ddr)


def test_reads_fetch_each_page_once():
    gdb, mem = memory()
    assert bytes(mem.read(0x3100_0010, 8)) == bytes(gdb.sram[16:24])
    assert bytes(mem.read(0x3100_0FF0, 32)) == bytes(gdb.sram[0xFF0:0x1010])
    assert gdb.reads == [(0x3100_0000, PAGE), (0x3100_1000, PAGE)]


def test_writes_stay_in_the_cache_until_flushed():
    gdb, mem = memory()
    mem.write(0x3100_0100, b"\xaa" * 4)
    mem.write(0x3100_1000, np.full(PAGE, 0x55, dtype=np.uint8))  # a whole page: no fetch
    assert gdb.sram[0x100] != 0xAA and gdb.reads == [(0x3100_0000, PAGE)]
    assert bytes(mem.read(0x3100_00FE, 4)) == bytes(gdb.sram[0xFE:0x100]) + b"\xaa\xaa"
    mem.flush()
    assert gdb.writes == [(0x3100_0000, 2 * PAGE)]
    assert gdb.sram[0x100:0x104] == b"\xaa" * 4 and gdb.sram[0x1000:0x2000] == b"\x55" * PAGE
    mem.begin()
    mem.read(0x3100_0000, 4)
    assert len(gdb.reads) == 2  # begin() dropped the cache


def test_a_streams_first_missing_page_brings_the_pages_the_stream_before_had():
    gdb, mem = memory()
    mem.read(0x3100_0010, 8)
    mem.write(0x3100_2004, b"\x01")
    mem.flush()
    mem.begin()
    del gdb.reads[:], gdb.batches[:]
    sram = bytes(gdb.sram)
    assert bytes(mem.read(0x3100_2000, 8)) == sram[0x2000:0x2008]
    assert bytes(mem.read(0x3100_0010, 8)) == sram[0x10:0x18]
    assert gdb.reads == [(0x3100_0000, PAGE), (0x3100_2000, PAGE)] and gdb.batches == [2]  # one round trip
    mem.read(0x3100_1000, 4)  # a page the stream before did not have
    assert gdb.reads[2:] == [(0x3100_1000, PAGE)]


def test_a_short_flush_is_handed_back_to_be_sent_with_the_continue():
    gdb, mem = memory()
    mem.write(0x3100_0100, b"\xaa" * 4)
    packets = mem.flush(defer=32)
    assert gdb.writes == [] and mem.bytes_written == PAGE
    assert packets == [(0x3100_0000, bytes(gdb.sram[:0x100]) + b"\xaa" * 4 + bytes(gdb.sram[0x104:PAGE]))]
    mem.write(0x3100_0100, b"\xbb" * 4)
    assert mem.flush(defer=0) == [] and gdb.writes == [(0x3100_0000, PAGE)]  # more than `defer`: written now


def test_peek_sees_what_the_npu_left_where_it_touched_memory():
    ddr = bytearray(0x1100_0000)
    gdb, mem = memory(memoryview(ddr))
    mem.write(0x3100_1002, b"\x01\x02")
    ddr[0x1000_0000:0x1000_0002] = b"\x03\x04"
    assert mem.peek(0x3100_1002, 2) == b"\x01\x02"  # the cached page, not yet flushed
    assert mem.peek(0x7000_0000, 2) == b"\x03\x04"  # DDR, shared
    assert mem.peek(0x3100_3000, 2) is None  # a page the NPU did not touch
    assert gdb.reads == [(0x3100_1000, PAGE)]


def test_addresses_outside_the_board_are_bus_errors():
    _, mem = memory()
    with pytest.raises(MemoryFault):
        mem.read(0x3100_3FFC, 8)  # runs past the end of the region
    with pytest.raises(MemoryFault):
        mem.write(0x0C00_0000, b"\0")


def test_ddr_is_read_and_written_in_place():
    ddr = bytearray(0x1100_0000)
    _, mem = memory(memoryview(ddr))
    mem.write(0x7000_0010, b"\x01\x02")
    assert ddr[0x1000_0010:0x1000_0012] == b"\x01\x02"
    assert bytes(mem.read(QEMU_DDR_BASE + 0x1000_0010, 2)) == b"\x01\x02"
