"""The Ethos-U register file's semantics, against the register map (offsets and bit
positions from the Ethos-U55/U65 TRM / Vela's ethos_u55_regs.py, values worked out by
hand). The executor is a fake that records what it was given."""

from dataclasses import dataclass, field

import numpy as np
import pytest

from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.device import EthosU, NpuModelError
from kiln.simulator.npu.memory import FlatMemory, MemoryFault

# Offsets typed out from the register map, not imported from the code under test.
ID, STATUS, CMD, RESET = 0x000, 0x004, 0x008, 0x00C
QBASE0, QBASE1, QREAD, QSIZE, PROT, CONFIG = 0x010, 0x014, 0x018, 0x020, 0x024, 0x028
REGIONCFG, AXI_LIMIT2, BASEP0 = 0x03C, 0x048, 0x080
PMCR, PMCNTENSET, PMCNTENCLR, PMOVSSET, PMOVSCLR, PMINTSET = 0x180, 0x184, 0x188, 0x18C, 0x190, 0x194
PMCCNTR_LO, PMCCNTR_HI, PMEVCNTR0, PMEVTYPER0 = 0x1A0, 0x1A4, 0x300, 0x380

STREAM_AT = 0x3100_0000


@dataclass
class Result:
    cycles: int
    ops: int = 1
    fault: object = None
    counters: dict = field(default_factory=dict)


@dataclass
class Fault:
    kind: str
    command_index: int
    message: str = "fake"


class FakeExecutor:
    def __init__(self, result):
        self.result = result
        self.calls = []

    def __call__(self, stream, basep, memory, config):
        self.calls.append((stream.copy(), basep, config))
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def device(result=None, target="ethos-u55-128", words=(0x0001_0000, 0x0000_0000)):
    result = Result(cycles=1000) if result is None else result
    memory = FlatMemory({STREAM_AT: bytearray(np.array(words, dtype="<u4").tobytes() + bytes(64))})
    executor = FakeExecutor(result)
    edges = []
    npu = EthosU(config_for(target), memory, executor=executor, on_irq=edges.append)
    npu.write(QBASE0, STREAM_AT)
    npu.write(QSIZE, 4 * len(words))
    return npu, executor, edges


@pytest.mark.parametrize(
    "target,config",
    [
        # CONFIG: macs_per_cc [3:0] = log2(MACs), cmd_stream_version [7:4] = 0,
        # shram_size [15:8] in KiB, product [31:28] (0 = U55, 1 = U65).
        ("ethos-u55-32", 0x0000_1005),
        ("ethos-u55-128", 0x0000_1807),
        ("ethos-u55-256", 0x0000_3008),
        ("ethos-u65-256", 0x1000_3008),
        ("ethos-u65-512", 0x1000_6009),
    ],
)
def test_id_and_config_identify_the_configuration(target, config):
    npu, _, _ = device(target=target)
    assert npu.read(CONFIG) == config
    assert npu.read(ID) == 0x1006_6001  # arch 1.0.6, product_major 6, r0p0 status 1
    npu.write(CONFIG, 0)
    npu.write(ID, 0)
    assert npu.read(CONFIG) == config and npu.read(ID) == 0x1006_6001  # read-only


def test_reset_values():
    npu, _, _ = device()
    npu.write(RESET, 0)
    assert npu.read(STATUS) == 0  # stopped, no irq, no faults, reset complete
    assert npu.read(CMD) == 0x0C  # clock_q_enable | power_q_enable
    assert npu.read(PMCR) == 4 << 11  # num_event_cnt = 4, counting off
    assert [npu.read(o) for o in (QBASE0, QBASE1, QSIZE, QREAD, REGIONCFG, PMCCNTR_LO)] == [0] * 6


def test_start_runs_the_stream_and_raises_the_interrupt():
    npu, executor, edges = device(words=(0x0001_0000, 0x4000_0010, 0x1234_5678))
    npu.write(BASEP0 + 8, 0x3100_1000)  # region 1, low word
    npu.write(BASEP0 + 12, 0)
    npu.write(BASEP0 + 8 * 7, 0x6000_0000)  # region 7: BASEP14
    npu.write(CMD, 0x1)
    ((stream, basep, config),) = executor.calls
    assert stream.tolist() == [0x0001_0000, 0x4000_0010, 0x1234_5678]
    assert basep == (0, 0x3100_1000, 0, 0, 0, 0, 0, 0x6000_0000)
    assert config.target == "ethos-u55-128"
    # irq_raised (bit 1) | cmd_end_reached (bit 5); state (bit 0) back to stopped.
    assert npu.read(STATUS) == 0x22
    assert npu.read(QREAD) == 12
    assert edges == [True]
    npu.write(CMD, 0x2)  # clear_irq
    assert npu.read(STATUS) == 0x20
    assert edges == [True, False]


def test_64_bit_base_pointers_and_qbase():
    npu, executor, _ = device()
    npu.write(BASEP0 + 8 * 3, 0x89AB_CDEF)
    npu.write(BASEP0 + 8 * 3 + 4, 0x1)
    assert npu.basep()[3] == 0x1_89AB_CDEF
    npu.write(QBASE1, 0x2)
    assert (npu.read(QBASE0), npu.read(QBASE1)) == (STREAM_AT, 2)


@pytest.mark.parametrize("kind,status", [("cmd_parse_error", 0x12), ("bus_error", 0x06)])
def test_a_fault_is_reported_in_status(kind, status):
    npu, _, edges = device(result=Result(cycles=50, fault=Fault(kind, command_index=1)))
    npu.write(CMD, 0x1)
    # irq_raised (bit 1) with cmd_parse_error (bit 4) or bus_status (bit 2), no cmd_end_reached.
    assert npu.read(STATUS) == status
    assert npu.read(QREAD) == 4
    assert edges == [True]


def test_a_stream_outside_memory_is_a_bus_error():
    npu, executor, _ = device()
    npu.write(QBASE0, 0x0C00_0000)
    npu.write(CMD, 0x1)
    assert npu.read(STATUS) == 0x06
    assert executor.calls == []
    assert isinstance(npu.runs[-1].fault, str) and "0xc000000" in npu.runs[-1].fault


def test_an_executor_memory_fault_is_a_bus_error():
    npu, _, _ = device(result=MemoryFault(0x7000_0000, 16, "read"))
    npu.write(CMD, 0x1)
    assert npu.read(STATUS) == 0x06


def test_a_ragged_qsize_is_a_parse_error():
    npu, executor, _ = device()
    npu.write(QSIZE, 6)
    npu.write(CMD, 0x1)
    assert npu.read(STATUS) == 0x12 and executor.calls == []


def test_a_model_failure_is_not_passed_off_as_a_hardware_fault():
    npu, _, _ = device(result=NotImplementedError("16-bit LUT"))
    with pytest.raises(NpuModelError, match="16-bit LUT"):
        npu.write(CMD, 0x1)


def test_pmu_cycle_counter_counts_enabled_runs():
    npu, _, _ = device(result=Result(cycles=0x1_0000_0005))
    npu.write(CMD, 0x1)
    assert npu.read(PMCCNTR_LO) == 0  # PMU off: nothing counted
    npu.write(PMCR, 0x1)  # cnt_en
    npu.write(CMD, 0x1)
    assert npu.read(PMCCNTR_LO) == 0  # counter not enabled in PMCNTENSET
    npu.write(PMCNTENSET, 1 << 31)
    npu.write(CMD, 0x1)
    npu.write(CMD, 0x1)
    assert (npu.read(PMCCNTR_HI), npu.read(PMCCNTR_LO)) == (2, 10)
    npu.write(PMCR, 0x1 | 0x4)  # cycle_cnt_rst
    assert npu.read(PMCCNTR_LO) == 0 and npu.read(PMCCNTR_HI) == 0
    npu.write(PMCNTENCLR, 1 << 31)
    assert npu.read(PMCNTENSET) == 0


def test_pmu_event_counters():
    npu, _, _ = device(result=Result(cycles=700, counters={"mac_active": 300}))
    npu.write(PMCR, 0x1)
    npu.write(PMEVTYPER0, 0x30)  # MAC_ACTIVE
    npu.write(PMEVTYPER0 + 4, 0x11)  # CYCLE
    npu.write(PMEVTYPER0 + 8, 0x84)  # AXI0_WR_TRANS_ACCEPTED: not reported by this executor
    npu.write(PMCNTENSET, 0b0111)
    npu.write(CMD, 0x1)
    assert [npu.read(PMEVCNTR0 + 4 * i) for i in range(4)] == [300, 700, 0, 0]
    npu.write(PMCR, 0x1 | 0x2)  # event_cnt_rst
    assert [npu.read(PMEVCNTR0 + 4 * i) for i in range(4)] == [0, 0, 0, 0]


def test_pmu_overflow_raises_the_pmu_interrupt():
    npu, _, edges = device(result=Result(cycles=10))
    npu.write(PMCR, 0x1)
    npu.write(PMCNTENSET, 1 << 31)
    npu.write(PMCCNTR_LO, 0xFFFF_FFFA)
    npu.write(PMCCNTR_HI, 0xFFFF)
    npu.write(PMINTSET, 1 << 31)
    npu.write(CMD, 0x1)
    assert npu.read(PMCCNTR_LO) == 4 and npu.read(PMCCNTR_HI) == 0  # 2^48 - 6 + 10 wraps to 4
    assert npu.read(PMOVSSET) == 1 << 31
    # irq_raised | cmd_end_reached | pmu_irq_raised (bit 6)
    assert npu.read(STATUS) == 0x62
    npu.write(CMD, 0x2)
    assert npu.read(STATUS) == 0x60 and npu.irq  # the PMU still holds the line
    npu.write(PMOVSCLR, 1 << 31)
    assert npu.read(STATUS) == 0x20 and not npu.irq
    assert edges == [True, False]


def test_soft_reset_sets_prot_and_clears_state():
    npu, _, _ = device()
    npu.write(REGIONCFG, 0b11_10_01)
    npu.write(AXI_LIMIT2, 0x0F0F_0023)
    npu.write(BASEP0, 0x1234)
    npu.write(CMD, 0x1)
    npu.write(RESET, 0x3)  # pending_cpl = privileged, pending_csl = non-secure
    assert npu.read(PROT) == 0x3
    assert npu.read(STATUS) == 0 and not npu.irq
    assert [npu.read(o) for o in (REGIONCFG, AXI_LIMIT2, BASEP0, QBASE0, QSIZE)] == [0] * 5


def test_register_fields_keep_their_widths():
    npu, _, _ = device()
    npu.write(REGIONCFG, 0xFFFF_FFFF)
    assert npu.read(REGIONCFG) == 0xFFFF  # 8 regions x 2 bits
    npu.write(AXI_LIMIT2, 0xFFFF_FFFF)
    assert npu.read(AXI_LIMIT2) == 0xFFFF_00F3  # max_beats[1:0] memtype[7:4] outstanding[31:16]
    npu.write(PMEVTYPER0, 0xFFFF_FFFF)
    assert npu.read(PMEVTYPER0) == 0x3FF
    npu.write(CMD, 0xFFFF_FFF0)  # no start, no clear: only clock/power bits read back
    assert npu.read(CMD) == 0x0


@pytest.mark.parametrize("offset", [0x1000, 0x2, -4])
def test_accesses_outside_the_window_are_refused(offset):
    npu, _, _ = device()
    with pytest.raises(ValueError, match="not a word inside"):
        npu.read(offset)


def test_a_hung_npu_stays_running_until_reset_or_stopped():
    memory = FlatMemory({STREAM_AT: bytearray(16)})
    executor = FakeExecutor(Result(cycles=1))
    npu = EthosU(config_for("ethos-u55-128"), memory, executor=executor, hang=True)
    npu.write(QSIZE, 4)
    npu.write(CMD, 0x1)
    assert npu.read(STATUS) == 0x1 and not npu.irq and executor.calls == []  # state = running
    npu.write(CMD, 0x10)  # stop_request
    assert npu.read(STATUS) == 0x0
    npu.write(CMD, 0x1)
    npu.write(RESET, 0x1)
    assert npu.read(STATUS) == 0x0 and npu.read(PROT) == 0x1
