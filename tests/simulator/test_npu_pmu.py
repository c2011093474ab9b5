"""The NPU model's PMU event counters: AXI data beats of the bytes a stream moved, on the AXI
port of each region's memory (vela.ini's Memory_Mode: Shared_Sram puts constants on Axi1,
the scratch on Axi0), 8-byte beats on the Ethos-U55 and 16-byte on the U65 and U85; NPU_ACTIVE
and the cycle counter both count the cycle estimate, NPU_IDLE counts 0. Expected values
worked out by hand from the hand-built stream's sizes."""

import pytest

from kiln.simulator.npu import FlatMemory, run_stream
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.device import EthosU
from tests.simulator.npu_streams import Stream

BASES = (0x1000, 0x8000, 0, 0, 0, 0, 0, 0)
DMA_BYTES, POOL_ELEMENTS = 40, 14
# Offsets and event numbers typed out from the register map (Vela 5.2.0's
# ethos_u65_interface.hpp / ethos_u85_interface.hpp), not imported from the code under test.
PMCR, PMCNTENSET, PMCCNTR_LO, PMEVCNTR0, PMEVTYPER0 = 0x180, 0x184, 0x1A0, 0x300, 0x380
QBASE0, QSIZE, CMD, BASEP0 = 0x010, 0x020, 0x008, 0x080
NPU_IDLE, NPU_ACTIVE = 0x20, 0x23
AXI0_RD_BEATS, AXI0_WR_BEATS, AXI1_RD_BEATS, AXI1_WR_BEATS = 0x82, 0x87, 0x182, 0x187
STREAM_AT = 0x2_0000


def stream() -> Stream:
    """A 1-D DMA of DMA_BYTES from region 0 (constants) to region 1 offset 64, then a 1x1 max
    pool of POOL_ELEMENTS int8 from region 1 offset 0 to offset 32: region 0 reads 40 bytes,
    region 1 reads 14 and writes 40 + 14."""
    s = (
        Stream()
        .set("DMA0_SRC_REGION", 0)
        .set1("DMA0_SRC", 0)
        .set("DMA0_DST_REGION", 1)
        .set1("DMA0_DST", 64)
        .set1("DMA0_LEN", DMA_BYTES)
        .op("DMA_START")
        .op("DMA_WAIT")
    )
    s.feature_map("IFM", 1, 0, 1, 1, POOL_ELEMENTS).feature_map("OFM", 1, 32, 1, 1, POOL_ELEMENTS)
    s.set("OFM_PRECISION", 1).set1("OFM_SCALE", 1, 0).set("KERNEL_WIDTH_M1", 0).set("KERNEL_HEIGHT_M1", 0)
    s.set("ACTIVATION_MIN", 0xFF80).set("ACTIVATION_MAX", 0x7F).op("POOL", 0)
    return s.op("STOP")


def memory() -> FlatMemory:
    return FlatMemory({0x1000: bytearray(range(64)), 0x8000: bytearray(256)})


@pytest.mark.parametrize(
    "target,system_config,memory_mode,beats",
    [
        # Shared_Sram: region 0 on Axi1, region 1 on Axi0. U55: 8-byte beats:
        # AXI0 reads ceil(14/8) = 2, writes ceil(54/8) = 7; AXI1 reads 40/8 = 5, writes 0.
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", (2, 7, 5, 0)),
        # U65, 16-byte beats: AXI0 ceil(14/16) = 1, ceil(54/16) = 4; AXI1 ceil(40/16) = 3.
        ("ethos-u65-256", "Ethos_U65_High_End", "Shared_Sram", (1, 4, 3, 0)),
        # Sram_Only puts every area on Axi0, but Vela then moves the constants to Axi1 (as an
        # "OnChipFlash" with the SRAM's timing), and so does the cycle estimate: as Shared_Sram.
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Sram_Only", (2, 7, 5, 0)),
        # Dedicated_Sram: regions 0 and 1 on Axi1 (region 2, the fast scratch, on Axi0).
        ("ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram", (0, 0, 4, 4)),
    ],
)
def test_beats_are_the_bytes_moved_on_each_port(target, system_config, memory_mode, beats):
    config = config_for(target, system_config, memory_mode)
    result = run_stream(stream().array(), BASES, memory(), config)
    assert result.fault is None, result.fault
    got = tuple(
        result.counters[name]
        for name in (
            "axi0_rd_data_beat_received",
            "axi0_wr_data_beat_written",
            "axi1_rd_data_beat_received",
            "axi1_wr_data_beat_written",
        )
    )
    assert got == beats


def start(npu, words) -> None:
    """Runs `words` (at STREAM_AT) as the driver starts a stream: regions 0 and 1 at 0x1000 and
    0x8000, the queue, CMD's transition-to-running with the clock and power enables; no fault."""
    npu.write(BASEP0, 0x1000)
    npu.write(BASEP0 + 8, 0x8000)
    npu.write(QBASE0, STREAM_AT)
    npu.write(QSIZE, 4 * len(words))
    npu.write(CMD, 0x1 | 0xC)
    assert npu.runs[-1].fault is None


def test_the_register_file_counts_active_idle_and_beats_as_programmed():
    """The driver's programming (event counters 0..3: NPU_IDLE, AXI0 read, AXI0 write, AXI1
    read; the cycle counter) on the U55 register file with the real executor."""
    words = stream().array()
    mem = memory()
    mem.add(STREAM_AT, bytearray(words.astype("<u4").tobytes()))
    config = config_for("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    npu = EthosU(config, mem)
    for i, event in enumerate((NPU_IDLE, AXI0_RD_BEATS, AXI0_WR_BEATS, AXI1_RD_BEATS)):
        npu.write(PMEVTYPER0 + 4 * i, event)
    npu.write(PMCR, 0x1 | 0x2 | 0x4)  # cnt_en, event and cycle counter reset
    npu.write(PMCNTENSET, (1 << 31) | 0xF)
    start(npu, words)
    cycles = npu.runs[-1].cycles
    assert cycles > 0 and npu.read(PMCCNTR_LO) == cycles
    assert cycles == run_stream(words, BASES, memory(), config).cycles  # the estimate, independently
    assert [npu.read(PMEVCNTR0 + 4 * i) for i in range(4)] == [0, 2, 7, 5]


def test_u85_event_counters_count_active_and_the_sram_and_ext_ports():
    """The U85's 8 counters at +0x1000: NPU_ACTIVE equals the cycle counter; its SRAM/EXT beat
    events have the U55's AXI0/AXI1 numbers (a DMA-only stream: 40 bytes region 0 -> 1)."""
    words = (
        Stream()
        .set("DMA0_SRC_REGION", 0)
        .set1("DMA0_SRC", 0)
        .set("DMA0_DST_REGION", 1)
        .set1("DMA0_DST", 64)
        .set1("DMA0_LEN", DMA_BYTES)
        .op("DMA_START")
        .op("DMA_WAIT")
        .op("STOP")
    ).array()
    mem = memory()
    mem.add(STREAM_AT, bytearray(words.astype("<u4").tobytes()))
    # Ethos_U85_SYS_DRAM_Mid, Dedicated_Sram_384KB: regions 0 and 1 on Axi1 (EXT), 16-byte beats.
    config = config_for("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram_384KB")
    npu = EthosU(config, mem)
    events = (NPU_ACTIVE, NPU_IDLE, AXI0_RD_BEATS, AXI0_WR_BEATS, AXI1_RD_BEATS, AXI1_WR_BEATS)
    for i, event in enumerate(events):
        npu.write(0x1000 + PMEVTYPER0 + 4 * i, event)
    npu.write(0x1000 + PMCR, 0x1 | 0x2 | 0x4)
    npu.write(0x1000 + PMCNTENSET, (1 << 31) | 0x3F)
    start(npu, words)
    cycles = npu.read(0x1000 + PMCCNTR_LO)
    assert cycles == npu.runs[-1].cycles  # the U85 estimate of a lone DMA may be 0; the count is the same
    assert [npu.read(0x1000 + PMEVCNTR0 + 4 * i) for i in range(6)] == [cycles, 0, 0, 0, 3, 3]
