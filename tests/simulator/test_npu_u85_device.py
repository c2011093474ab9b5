"""The Ethos-U85 register window (kiln.simulator.npu.device with an ethos-u85 config),
against the U85 register map (offsets and fields typed out from Vela 5.2.0's
ethos_u85_interface.hpp, values worked out by hand), and one Vela-compiled U85 stream run
through the window on the real model."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kiln.lower.vela import compile_tosa
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.device import EthosU, window_size
from kiln.simulator.npu.memory import FlatMemory
from tests.simulator import helpers

# Ethos-U85 offsets, typed out from the register map.
ID, STATUS, CMD, RESET, QBASE0, QBASE1, QREAD, QSIZE, CONFIG = 0x0, 0x4, 0x8, 0xC, 0x10, 0x14, 0x18, 0x20, 0x28
COND_STATUS, POWER_CTRL, REGIONCFG, MEM_ATTR0, AXI_SRAM, AXI_EXT, CFG_SRAM_CAP = (
    0x30,
    0x38,
    0x3C,
    0x40,
    0x50,
    0x54,
    0x60,
)
BASEP0 = 0x80
PMCR, PMCNTENSET, PMOVSSET, PMINTSET, PMCCNTR_LO, PMCCNTR_HI = 0x1180, 0x1184, 0x118C, 0x1194, 0x11A0, 0x11A4
PMEVCNTR0, PMEVTYPER0 = 0x1300, 0x1380
U55_PMCR, U55_LOCK = 0x180, 0x2C

STREAM_AT = 0x3100_0000


def Result(cycles: int, counters: dict | None = None):  # noqa: N802 - stands in for ExecResult
    return SimpleNamespace(cycles=cycles, ops=1, fault=None, counters=counters or {})


def device(target="ethos-u85-256", result=None):
    result = Result(cycles=1000) if result is None else result
    memory = FlatMemory({STREAM_AT: bytearray(64)})
    calls = []

    def executor(stream, basep, memory, config):
        calls.append((basep, config))
        return result

    npu = EthosU(config_for(target), memory, executor=executor)
    npu.write(QBASE0, STREAM_AT)
    npu.write(QSIZE, 8)
    return npu, calls


@pytest.mark.parametrize(
    "target, config",
    [
        # macs_per_cc [3:0], cmd_stream_version [7:4] = 1, num_axi_sram [9:8], num_axi_ext [10],
        # num_wd [13:12] = log2(cores), product [31:28] = 2 (Ethos-U85)
        ("ethos-u85-128", 0x2000_0117),
        ("ethos-u85-256", 0x2000_0118),
        ("ethos-u85-512", 0x2000_1119),
        ("ethos-u85-1024", 0x2000_251A),
        ("ethos-u85-2048", 0x2000_261B),
    ],
)
def test_id_and_config(target, config):
    npu, _ = device(target)
    assert npu.read(CONFIG) == config
    assert npu.read(CONFIG) >> 28 == 2  # what Arm's driver checks before it starts a U85
    assert npu.read(ID) == 0x2000_7000  # arch 2.0.0, product_major 7, r0p0
    npu.write(ID, 0)
    assert npu.read(ID) == 0x2000_7000


def test_window_and_pmu_block_move_by_0x1000():
    npu, _ = device()
    assert window_size(config_for("ethos-u85-256")) == 0x1400
    assert window_size(config_for("ethos-u55-128")) == 0x1000
    assert npu.read(PMCR) == 8 << 11  # num_event_cnt = 8
    assert npu.read(U55_PMCR) == 0  # the U55's PMCR offset is nothing on a U85
    npu.write(U55_PMCR, 0x1)
    assert npu.read(PMCR) == 8 << 11
    with pytest.raises(ValueError, match="not a word inside"):
        npu.read(0x1400)
    assert npu.read(0x13FC) == 0  # PMEVTYPER7's neighbourhood: inside the window
    assert npu.read(0x1000) == 0  # not the ID register again


def test_eight_event_counters_count_runs():
    npu, _ = device(result=Result(cycles=700, counters={"mac_active": 300}))
    npu.write(PMCR, 0x1)
    npu.write(PMEVTYPER0 + 4 * 7, 0x30)  # counter 7: MAC_ACTIVE
    npu.write(PMEVTYPER0 + 4 * 5, 0x11)  # counter 5: CYCLE
    npu.write(PMCNTENSET, 0xFFFF_FFFF)
    assert npu.read(PMCNTENSET) == (1 << 31) | 0xFF  # cycle counter and 8 event counters
    npu.write(CMD, 0x1)
    assert [npu.read(PMEVCNTR0 + 4 * i) for i in range(8)] == [0, 0, 0, 0, 0, 700, 0, 300]
    assert (npu.read(PMCCNTR_HI), npu.read(PMCCNTR_LO)) == (0, 700)


def test_u85_configuration_registers_store_their_fields():
    npu, _ = device()
    npu.write(MEM_ATTR0 + 12, 0xFFFF_FFFF)
    assert npu.read(MEM_ATTR0 + 12) == 0xF7  # mem_domain [1:0], axi_port [2], memtype [7:4]
    npu.write(AXI_SRAM, 0xFFFF_FFFF)
    npu.write(AXI_EXT, 0x0001_0203)
    # max_outstanding_read_m1 [5:0], max_outstanding_write_m1 [12:8], max_beats [17:16]
    assert (npu.read(AXI_SRAM), npu.read(AXI_EXT)) == (0x3_1F3F, 0x1_0203)
    npu.write(POWER_CTRL, 0xFF)
    assert npu.read(POWER_CTRL) == 0x3F
    for offset in (U55_LOCK, COND_STATUS, CFG_SRAM_CAP):
        npu.write(offset, 0xFFFF_FFFF)
        assert npu.read(offset) == 0
    npu.write(REGIONCFG, 0xFFFF_FFFF)
    assert npu.read(REGIONCFG) == 0xFFFF
    npu.write(RESET, 0)
    assert [npu.read(o) for o in (MEM_ATTR0 + 12, AXI_SRAM, POWER_CTRL)] == [0, 0, 0]


def test_addresses_are_40_bits():
    npu, calls = device()
    npu.write(BASEP0 + 8 * 2, 0x89AB_CDEF)
    npu.write(BASEP0 + 8 * 2 + 4, 0xFFFF_FF12)
    npu.write(QBASE1, 0xFFFF_FF00)
    assert npu.basep()[2] == 0x12_89AB_CDEF
    assert npu.read(BASEP0 + 8 * 2 + 4) == 0x12
    assert npu.read(QBASE1) == 0
    npu.write(CMD, 0x1)
    assert calls[0][0][2] == 0x12_89AB_CDEF


def _program(seed: int = 8600):
    graph = helpers.build_batch(seed, range(3), ["conv", "add_sub", "max_pool"])
    vela = compile_tosa(graph.serialize(), "device", "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Shared_Sram")
    return graph, vela


def test_a_compiled_u85_stream_runs_through_the_window():
    graph, vela = _program()
    stream = parse_cop1(vela.cmd_data).stream.astype("<u4").tobytes()
    weights, scratch = bytearray(vela.weight_data), bytearray(max(vela.scratch_size, 16))
    memory = FlatMemory({STREAM_AT: bytearray(stream), 0x6000_0000: weights, 0x7000_0000: scratch})
    for tensor, value in zip(vela.inputs, graph.inputs):
        raw = np.ascontiguousarray(value).tobytes()
        scratch[tensor.offset : tensor.offset + len(raw)] = raw
    npu = EthosU(config_for("ethos-u85-256"), memory)
    npu.write(QBASE0, STREAM_AT)
    npu.write(QSIZE, len(stream))
    npu.write(BASEP0, 0x6000_0000)
    npu.write(BASEP0 + 8, 0x7000_0000)
    npu.write(PMCR, 0x1)
    npu.write(PMCNTENSET, 1 << 31)
    npu.write(CMD, 0x1)
    assert npu.read(STATUS) == 0x22  # irq_raised | cmd_end_reached
    assert npu.read(QREAD) == len(stream)
    assert npu.read(PMCCNTR_LO) > 0
    want = helpers.reference(graph.serialize(), graph.inputs)
    for tensor, expected in zip(vela.outputs, want):
        got = np.frombuffer(bytes(scratch[tensor.offset : tensor.offset + expected.nbytes]), expected.dtype)
        assert np.array_equal(got, expected.reshape(-1))


def test_a_new_stream_at_the_same_address_runs_as_itself():
    """Two compiled programs whose streams are written in turn at the same QBASE, their weights and
    scratch at the same BASEPs: each run gives tosa_reference_model's outputs of the program whose
    stream is there now, the first program again after the second included (what the model kept of
    a stream, its recorded operations prepared for these bases, is the stream's own)."""
    programs = [_program(), _program(8601)]
    streams = [parse_cop1(vela.cmd_data).stream.astype("<u4").tobytes() for _, vela in programs]
    assert streams[0] != streams[1]
    code = bytearray(max(map(len, streams)))
    weights = bytearray(max(len(vela.weight_data) for _, vela in programs))
    scratch = bytearray(max(max(vela.scratch_size, 16) for _, vela in programs))
    npu = EthosU(config_for("ethos-u85-256"), FlatMemory({STREAM_AT: code, 0x6000_0000: weights, 0x7000_0000: scratch}))
    npu.write(QBASE0, STREAM_AT)
    npu.write(BASEP0, 0x6000_0000)
    npu.write(BASEP0 + 8, 0x7000_0000)
    for which in (0, 1, 0, 1):
        (graph, vela), stream = programs[which], streams[which]
        code[: len(stream)] = stream
        weights[: len(vela.weight_data)] = vela.weight_data
        for tensor, value in zip(vela.inputs, graph.inputs):
            raw = np.ascontiguousarray(value).tobytes()
            scratch[tensor.offset : tensor.offset + len(raw)] = raw
        npu.write(QSIZE, len(stream))
        npu.write(CMD, 0x1)
        assert npu.read(STATUS) == 0x22, which  # irq_raised | cmd_end_reached
        for tensor, expected in zip(vela.outputs, helpers.reference(graph.serialize(), graph.inputs)):
            got = np.frombuffer(bytes(scratch[tensor.offset : tensor.offset + expected.nbytes]), expected.dtype)
            assert np.array_equal(got, expected.reshape(-1)), which


def test_a_command_the_model_refuses_is_a_parse_error_at_its_offset():
    # NPU_OP_BRANCH (cmd1 opcode 0x100, a payload word) is not modelled: cmd_parse_error, QREAD at its word
    words = np.array([0x0000_012F, 0x0000_4100, 0x0000_0000, 0x0000_0000], "<u4").tobytes()
    memory = FlatMemory({STREAM_AT: bytearray(words)})
    npu = EthosU(config_for("ethos-u85-256"), memory)
    npu.write(QBASE0, STREAM_AT)
    npu.write(QSIZE, len(words))
    npu.write(CMD, 0x1)
    assert npu.read(STATUS) == 0x12  # irq_raised | cmd_parse_error
    assert npu.read(QREAD) == 4
