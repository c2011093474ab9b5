"""The Ethos-U55/U65/U85 register file: what the CPU sees at the NPU's register window.

Offsets and bit meanings are the Ethos-U55/U65 register map (as in Vela's
ethos_u55_regs.py and the TRM); the constants below are its offsets. Every register is
32 bits wide; offsets not listed read as zero and ignore writes (reserved, RAZ/WI).
The configuration's family (kiln.simulator.npu.family) picks the layout (LAYOUTS):

  Ethos-U55/U65: a 4 KiB window (WINDOW_SIZE); LOCK 0x02C, AXI_LIMIT0..3 0x040..0x04C;
    the PMU at 0x180..0x1AC, 4 event counters (PMEVCNTR 0x300, PMEVTYPER 0x380);
    QBASE1 and the BASEP high words hold 32 bits.
  Ethos-U85 (Vela 5.2.0's ethos_u85_interface.hpp): a 0x1400-byte window
    (WINDOW_SIZE_U85); no LOCK or AXI_LIMIT; COND_STATUS 0x030 (read-only, 0),
    POWER_CTRL 0x038, MEM_ATTR0..3 0x040..0x04C, AXI_SRAM 0x050, AXI_EXT 0x054 store
    what is written (their fields' widths); CFG_SRAM_CAP, CFG_EXT_CAP and the CFG hashes
    (0x060..0x07C) read 0; the status/debug/PMU block moves by 0x1000 (PMCR 0x1180,
    PMCCNTR 0x11A0, PMEVCNTR 0x1300, PMEVTYPER 0x1380) with 8 event counters;
    0x100..0xFFC read 0; addresses are 40 bits (QBASE1 and each BASEP high word keep
    bits 7..0); CONFIG.product reads 2. STATUS has the U55's bits (bit 9,
    branch_fault, stays 0: BRANCH is not modelled).

Execution is synchronous: a write to CMD with transition_to_running_state runs
the whole command stream at QBASE (QSIZE bytes) through the executor before the
write returns, so from the CPU's side the NPU finishes between two accesses.
On completion STATUS holds what the hardware reports when it stops
(state STOPPED, irq_raised and cmd_end_reached, or irq_raised with
cmd_parse_error / bus_status) and the interrupt line rises.

Choices where the register map leaves room (documented, not measured):
- CMD reads back only clock_q_enable and power_q_enable; its reset value sets
  both. The other CMD bits are write-only actions and read as zero;
  stop_request stops a running NPU (only a hung one is ever running here).
- RESET completes at once (STATUS.reset_status reads 0); PROT takes the
  requested privilege/security levels; every other register returns to reset.
- QREAD reads QSIZE after a stream ran to its end, else the byte offset of the
  command that faulted (4 x NpuFault.command_index).
- The PMU counts only while PMCR.cnt_en is set and the counter is enabled in
  PMCNTENSET; PMCCNTR (48 bits) advances by ExecResult.cycles; PMCCNTR_CFG's
  start/stop events are stored but the cycle counter counts the whole run.
  Event counters count ExecResult.counters[name] where name is the lower-case
  pmu_event_type name (e.g. "mac_active"); CYCLE and NPU_ACTIVE count cycles;
  events the executor does not report stay unchanged. So for each run NPU_ACTIVE and
  PMCCNTR both advance by the cycle estimate, and the AXI data-beat events (0x82, 0x87,
  0x182, 0x187: AXI0/AXI1 or, on the U85, SRAM/EXT read and write beats) by the beats of
  the bytes the run moved (kiln.simulator.npu.pmu). NPU_IDLE counts 0: the model runs a
  stream within one register write, so the NPU is never enabled and waiting on the
  virtual clock (on hardware it counts the cycles between the PMU's enable and the start,
  and any the NPU waits idle).
- An overflowing counter sets its PMOVSSET bit and, if enabled in PMINTSET,
  STATUS.pmu_irq_raised and the interrupt.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kiln.errors import NpuModelError
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.family import U55, U85, family_of
from kiln.simulator.npu.memory import MemoryFault

MASK32 = 0xFFFF_FFFF

WINDOW_SIZE = 0x1000  # bytes, Ethos-U55/U65
WINDOW_SIZE_U85 = 0x1400  # bytes, Ethos-U85

# Register offsets (bytes from the NPU base; Ethos-U55/U65, and the U85 where it agrees).
ID = 0x000
STATUS = 0x004
CMD = 0x008
RESET = 0x00C
QBASE0 = 0x010
QBASE1 = 0x014
QREAD = 0x018
QCONFIG = 0x01C
QSIZE = 0x020
PROT = 0x024
CONFIG = 0x028
LOCK = 0x02C
REGIONCFG = 0x03C
AXI_LIMIT0 = 0x040  # AXI_LIMIT0..3 at 0x040, 0x044, 0x048, 0x04C
BASEP0 = 0x080  # BASEP0..15: region n's 64-bit base is BASEP(2n) | BASEP(2n+1) << 32
PMCR = 0x180
PMCNTENSET = 0x184
PMCNTENCLR = 0x188
PMOVSSET = 0x18C
PMOVSCLR = 0x190
PMINTSET = 0x194
PMINTCLR = 0x198
PMCCNTR_LO = 0x1A0
PMCCNTR_HI = 0x1A4
PMCCNTR_CFG = 0x1A8
PMCAXI_CHAN = 0x1AC
PMEVCNTR0 = 0x300  # PMEVCNTR0..3
PMEVTYPER0 = 0x380  # PMEVTYPER0..3

# Ethos-U85 only.
COND_STATUS = 0x030
POWER_CTRL = 0x038
MEM_ATTR0 = 0x040  # MEM_ATTR0..3 at 0x040, 0x044, 0x048, 0x04C
AXI_SRAM = 0x050
AXI_EXT = 0x054
U85_PMU_SHIFT = 0x1000  # the U85's status/debug/PMU block sits this far above the U55's

REGIONS = 8
AXI_LIMITS = 4
MEM_ATTRS = 4
EVENT_COUNTERS = 4  # Ethos-U55/U65
EVENT_COUNTERS_U85 = 8

# STATUS bits.
STATUS_STATE_RUNNING = 1 << 0
STATUS_IRQ_RAISED = 1 << 1
STATUS_BUS_STATUS = 1 << 2
STATUS_RESET_STATUS = 1 << 3
STATUS_CMD_PARSE_ERROR = 1 << 4
STATUS_CMD_END_REACHED = 1 << 5
STATUS_PMU_IRQ_RAISED = 1 << 6
STATUS_WD_FAULT = 1 << 7
STATUS_ECC_FAULT = 1 << 8
STATUS_FAULTING_INTERFACE = 1 << 11
STATUS_FAULTING_CHANNEL_SHIFT = 12  # 4 bits

# CMD bits.
CMD_TRANSITION_TO_RUNNING_STATE = 1 << 0
CMD_CLEAR_IRQ = 1 << 1
CMD_CLOCK_Q_ENABLE = 1 << 2
CMD_POWER_Q_ENABLE = 1 << 3
CMD_STOP_REQUEST = 1 << 4
CMD_READBACK = CMD_CLOCK_Q_ENABLE | CMD_POWER_Q_ENABLE
CMD_RESET_VALUE = CMD_CLOCK_Q_ENABLE | CMD_POWER_Q_ENABLE

# RESET / PROT bits: privilege (1 = privileged) and security (1 = non-secure) level.
RESET_PENDING_CPL = 1 << 0
RESET_PENDING_CSL = 1 << 1

# PMCR bits.
PMCR_CNT_EN = 1 << 0
PMCR_EVENT_CNT_RST = 1 << 1
PMCR_CYCLE_CNT_RST = 1 << 2
PMCR_MASK_EN = 1 << 3
PMCR_NUM_EVENT_CNT_SHIFT = 11  # 5 bits, read-only

# PMCNTEN/PMOVS/PMINT bit of the cycle counter (event counters are bits 0..3, U85 0..7).
PMU_CYCLE_COUNTER = 1 << 31
PMU_COUNTER_MASK = PMU_CYCLE_COUNTER | ((1 << EVENT_COUNTERS) - 1)
PMCCNTR_BITS = 48


@dataclass(frozen=True)
class Layout:
    """Where one NPU family's registers differ (see the module docstring)."""

    family: str
    window_size: int
    event_counters: int
    address_high_mask: int  # bits of QBASE1 and of each BASEP high word the NPU keeps
    pmu_shift: int  # the status/debug/PMU block's offset above the Ethos-U55/U65's

    @property
    def counter_mask(self) -> int:
        return PMU_CYCLE_COUNTER | ((1 << self.event_counters) - 1)


U55_LAYOUT = Layout(U55.name, WINDOW_SIZE, EVENT_COUNTERS, MASK32, 0)
U85_LAYOUT = Layout(U85.name, WINDOW_SIZE_U85, EVENT_COUNTERS_U85, 0xFF, U85_PMU_SHIFT)
LAYOUTS = {U55: U55_LAYOUT, U85: U85_LAYOUT}  # by kiln.simulator.npu.family

# Ethos-U85 configuration registers that store what is written, with their fields' widths.
_U85_STORED = {POWER_CTRL: 0x3F, AXI_SRAM: 0x3_1F3F, AXI_EXT: 0x3_1F3F}
_U85_STORED.update({MEM_ATTR0 + 4 * i: 0xF7 for i in range(MEM_ATTRS)})


def layout_for(config: NpuConfig) -> Layout:
    return LAYOUTS[family_of(config)]


def window_size(config: NpuConfig) -> int:
    """Bytes of the register window of `config`'s NPU."""
    return layout_for(config).window_size


# pmu_event_type codes whose count the register file derives itself.
EVENT_CYCLE = 0x11
EVENT_NPU_IDLE = 0x20
EVENT_NPU_ACTIVE = 0x23


@dataclass
class RunRecord:
    """What one CMD-started run did (for the attachment's report and the tests)."""

    qbase: int
    qsize: int
    basep: tuple[int, ...]
    cycles: int
    fault: object | None  # NpuFault or None
    counters: dict | None = None  # ExecResult.counters of the run (None: it did not run)


def _default_executor():
    """run_stream, its coverage left uncounted: the register file reads the cycles, counters
    and fault alone."""
    from kiln.simulator.npu import run_stream  # lazily: the engine is a separate module

    return functools.partial(run_stream, coverage=False)


# pmu_event_type code -> the ExecResult.counters key the executor reports it under.
EVENT_NAMES = {
    0x21: "cc_stalled_on_blockdep", 0x22: "cc_stalled_on_shram_reconfig",
    0x30: "mac_active", 0x31: "mac_active_8bit", 0x32: "mac_active_16bit",
    0x33: "mac_dpu_active", 0x38: "mac_active_32bit",
    0x40: "ao_active", 0x41: "ao_active_8bit", 0x42: "ao_active_16bit",
    0x50: "wd_active",
    0x80: "axi0_rd_trans_accepted", 0x82: "axi0_rd_data_beat_received",
    0x84: "axi0_wr_trans_accepted", 0x87: "axi0_wr_data_beat_written",
    0x180: "axi1_rd_trans_accepted", 0x182: "axi1_rd_data_beat_received",
    0x184: "axi1_wr_trans_accepted", 0x187: "axi1_wr_data_beat_written",
}  # fmt: skip


class EthosU:
    """One Ethos-U55/U65/U85 as its register window: read(offset) and write(offset, value).

    `memory` is what the NPU reaches over its AXI ports (a kiln.simulator.npu.Memory);
    the register file touches it only while a CMD write runs a stream. `on_irq(level)`
    is called when the interrupt line changes. `executor` runs a stream
    (run_stream's signature); it defaults to kiln.simulator.npu.run_stream.
    `hang=True` models an NPU that never finishes: a start only sets STATUS.state to
    running (for testing a driver's timeout path; a soft reset stops it).
    `region_sizes()`, called at each start, gives the bytes of each region's buffer as
    the firmware registered them (8 sizes; the Ethos-U55/U65 have no region size
    registers, nor has the U85, so these come from the firmware by another channel:
    kiln.simulator.attach)
    or None; the executor then refuses any access outside [BASEP<n>, BASEP<n> + size).
    """

    def __init__(
        self,
        config: NpuConfig,
        memory,
        *,
        executor: Callable | None = None,
        on_irq: Callable[[bool], None] | None = None,
        hang: bool = False,
        region_sizes: Callable[[], tuple[int, ...] | None] | None = None,
    ):
        self.config = config
        self.layout = layout_for(config)
        self.memory = memory
        self._executor = executor
        self._on_irq = on_irq or (lambda level: None)
        self._hang = hang
        self._region_sizes = region_sizes
        self.runs: list[RunRecord] = []
        self._irq_level = False
        self._prot = 0
        self._reset_state()

    # ------------------------------------------------------------------ state

    def _reset_state(self):
        self._status = 0
        self._cmd = CMD_RESET_VALUE
        self._qbase = 0
        self._qread = 0
        self._qconfig = 0
        self._qsize = 0
        self._lock = 0
        self._regioncfg = 0
        self._axi_limit = [0] * AXI_LIMITS
        self._u85_stored = dict.fromkeys(_U85_STORED, 0)
        self._basep = [0] * (2 * REGIONS)
        self._pmcr = 0
        self._pmcnten = 0
        self._pmovs = 0
        self._pmint = 0
        self._pmccntr = 0
        self._pmccntr_cfg = 0
        self._pmcaxi_chan = 0
        self._pmevcntr = [0] * self.layout.event_counters
        self._pmevtyper = [0] * self.layout.event_counters
        self._update_irq()

    @property
    def irq(self) -> bool:
        """The interrupt line: high while STATUS.irq_raised or pmu_irq_raised is set."""
        return self._irq_level

    def basep(self) -> tuple[int, ...]:
        """The 8 regions' 64-bit base addresses as programmed."""
        return tuple(self._basep[2 * n] | (self._basep[2 * n + 1] << 32) for n in range(REGIONS))

    # ------------------------------------------------------------------ bus

    def _canonical(self, offset: int) -> int | None:
        """`offset` as the Ethos-U55/U65 map names it: on the U85 its status/debug/PMU block
        (0x1100..0x13FC) moved back by 0x1000, and None for 0x100..0x10FC, which hold none
        of the modelled registers."""
        _check_offset(offset, self.layout.window_size)
        shift = self.layout.pmu_shift
        if not shift:
            return offset
        if offset >= shift:
            return offset - shift if offset - shift >= 0x100 else None
        return offset if offset < 0x100 else None

    def read(self, offset: int) -> int:
        """The 32-bit value at `offset` (a multiple of 4 inside the window)."""
        offset = self._canonical(offset)
        if offset is None:
            return 0
        if self.layout.pmu_shift and offset < 0x100:
            if offset in self._u85_stored:
                return self._u85_stored[offset]
            if offset == LOCK or 0x040 <= offset < 0x080:
                return 0  # the U85 has no LOCK or AXI_LIMIT; COND_STATUS and the CFG registers read 0
        simple = {
            ID: self.config.id_register,
            STATUS: self._status,
            CMD: self._cmd & CMD_READBACK,
            QBASE0: self._qbase & MASK32,
            QBASE1: self._qbase >> 32,
            QREAD: self._qread,
            QCONFIG: self._qconfig,
            QSIZE: self._qsize,
            PROT: self._prot,
            CONFIG: self.config.config_register,
            LOCK: self._lock,
            REGIONCFG: self._regioncfg,
            PMCR: self._pmcr | (self.layout.event_counters << PMCR_NUM_EVENT_CNT_SHIFT),
            PMCNTENSET: self._pmcnten,
            PMCNTENCLR: self._pmcnten,
            PMOVSSET: self._pmovs,
            PMOVSCLR: self._pmovs,
            PMINTSET: self._pmint,
            PMINTCLR: self._pmint,
            PMCCNTR_LO: self._pmccntr & MASK32,
            PMCCNTR_HI: self._pmccntr >> 32,
            PMCCNTR_CFG: self._pmccntr_cfg,
            PMCAXI_CHAN: self._pmcaxi_chan,
        }
        if offset in simple:
            return simple[offset]
        index = _array_index(offset, AXI_LIMIT0, AXI_LIMITS)
        if index is not None:
            return self._axi_limit[index]
        index = _array_index(offset, BASEP0, 2 * REGIONS)
        if index is not None:
            return self._basep[index]
        index = _array_index(offset, PMEVCNTR0, self.layout.event_counters)
        if index is not None:
            return self._pmevcntr[index]
        index = _array_index(offset, PMEVTYPER0, self.layout.event_counters)
        if index is not None:
            return self._pmevtyper[index]
        return 0

    def write(self, offset: int, value: int):
        """Stores the 32-bit `value` at `offset` with the register's side effects."""
        offset = self._canonical(offset)
        if not 0 <= value <= MASK32:
            raise ValueError(f"NPU register value {value:#x} does not fit in 32 bits")
        if offset is None:
            return
        if self.layout.pmu_shift and offset < 0x100:
            if offset in self._u85_stored:
                self._u85_stored[offset] = value & _U85_STORED[offset]
                return
            if offset == LOCK or 0x040 <= offset < 0x080:
                return
        counters = self.layout.counter_mask
        handlers = {
            CMD: self._write_cmd,
            RESET: self._write_reset,
            QBASE0: lambda v: self._set_qbase(v, high=False),
            QBASE1: lambda v: self._set_qbase(v, high=True),
            QCONFIG: lambda v: setattr(self, "_qconfig", v),
            QSIZE: lambda v: setattr(self, "_qsize", v),
            LOCK: lambda v: setattr(self, "_lock", v),
            REGIONCFG: lambda v: setattr(self, "_regioncfg", v & 0xFFFF),
            PMCR: self._write_pmcr,
            PMCNTENSET: lambda v: setattr(self, "_pmcnten", self._pmcnten | (v & counters)),
            PMCNTENCLR: lambda v: setattr(self, "_pmcnten", self._pmcnten & ~v),
            PMOVSSET: lambda v: self._set_overflow(self._pmovs | (v & counters)),
            PMOVSCLR: lambda v: self._set_overflow(self._pmovs & ~v),
            PMINTSET: lambda v: self._set_pmint(self._pmint | (v & counters)),
            PMINTCLR: lambda v: self._set_pmint(self._pmint & ~v),
            PMCCNTR_LO: lambda v: setattr(self, "_pmccntr", (self._pmccntr & ~MASK32) | v),
            PMCCNTR_HI: lambda v: setattr(self, "_pmccntr", (self._pmccntr & MASK32) | ((v & 0xFFFF) << 32)),
            PMCCNTR_CFG: lambda v: setattr(self, "_pmccntr_cfg", v & 0x03FF_03FF),
            PMCAXI_CHAN: lambda v: setattr(self, "_pmcaxi_chan", v & 0x7CF),
        }  # fmt: skip
        if offset in handlers:
            handlers[offset](value)
            return
        for base, count, array, mask in (
            (AXI_LIMIT0, AXI_LIMITS, self._axi_limit, 0xFFFF_00F3),
            (BASEP0, 2 * REGIONS, self._basep, MASK32),
            (PMEVCNTR0, self.layout.event_counters, self._pmevcntr, MASK32),
            (PMEVTYPER0, self.layout.event_counters, self._pmevtyper, 0x3FF),
        ):
            index = _array_index(offset, base, count)
            if index is not None:
                high_word = base == BASEP0 and index % 2
                array[index] = value & (self.layout.address_high_mask if high_word else mask)
                return
        # ID, STATUS, QREAD, PROT, CONFIG and reserved offsets are read-only.

    # ------------------------------------------------------------------ side effects

    def _set_qbase(self, value: int, high: bool):
        if high:
            self._qbase = (self._qbase & MASK32) | ((value & self.layout.address_high_mask) << 32)
        else:
            self._qbase = (self._qbase & ~MASK32) | value

    def _write_cmd(self, value: int):
        self._cmd = value & CMD_READBACK
        if value & CMD_CLEAR_IRQ:
            self._status &= ~STATUS_IRQ_RAISED
            self._update_irq()
        if value & CMD_STOP_REQUEST:
            self._status &= ~STATUS_STATE_RUNNING
        if value & CMD_TRANSITION_TO_RUNNING_STATE and not self._status & STATUS_STATE_RUNNING:
            if self._hang:
                self._status |= STATUS_STATE_RUNNING
            else:
                self._run()

    def _write_reset(self, value: int):
        self._prot = value & (RESET_PENDING_CPL | RESET_PENDING_CSL)
        self._reset_state()

    def _write_pmcr(self, value: int):
        self._pmcr = value & (PMCR_CNT_EN | PMCR_MASK_EN)
        if value & PMCR_EVENT_CNT_RST:
            self._pmevcntr = [0] * self.layout.event_counters
        if value & PMCR_CYCLE_CNT_RST:
            self._pmccntr = 0

    def _set_overflow(self, value: int):
        self._pmovs = value & self.layout.counter_mask
        self._update_pmu_irq()

    def _set_pmint(self, value: int):
        self._pmint = value & self.layout.counter_mask
        self._update_pmu_irq()

    def _update_pmu_irq(self):
        if self._pmovs & self._pmint:
            self._status |= STATUS_PMU_IRQ_RAISED
        else:
            self._status &= ~STATUS_PMU_IRQ_RAISED
        self._update_irq()

    def _update_irq(self):
        level = bool(self._status & (STATUS_IRQ_RAISED | STATUS_PMU_IRQ_RAISED))
        if level != self._irq_level:
            self._irq_level = level
            self._on_irq(level)

    # ------------------------------------------------------------------ running a stream

    def _run(self):
        self._status &= ~(STATUS_CMD_END_REACHED | STATUS_CMD_PARSE_ERROR | STATUS_BUS_STATUS)
        self._status &= ~(STATUS_FAULTING_INTERFACE | (0xF << STATUS_FAULTING_CHANNEL_SHIFT))
        basep = self.basep()
        try:
            stream = self._fetch_stream()
        except MemoryFault as error:
            self._finish(0, None, STATUS_BUS_STATUS, qread=0, record_fault=str(error))
            return
        if stream is None:
            self._finish(
                0,
                None,
                STATUS_CMD_PARSE_ERROR,
                qread=0,
                record_fault=f"QSIZE {self._qsize} is not a whole number of 32-bit words",
            )
            return
        executor = self._executor or _default_executor()
        limits = self._region_sizes() if self._region_sizes else None
        try:
            if limits is None:
                result = executor(stream, basep, self.memory, self.config)
            else:
                result = executor(stream, basep, self.memory, self.config, limits=limits)
        except MemoryFault as error:  # an executor that lets the fault escape
            self._finish(0, None, STATUS_BUS_STATUS, qread=0, record_fault=str(error))
            return
        except Exception as error:
            raise NpuModelError(f"the NPU model failed on the stream at {self._qbase:#x}: {error}") from error
        fault = result.fault
        if fault is None:
            bits, qread = STATUS_CMD_END_REACHED, self._qsize
        else:
            bits = STATUS_BUS_STATUS if fault.kind == "bus_error" else STATUS_CMD_PARSE_ERROR
            qread = min(4 * fault.command_index, self._qsize)
        self._count(result)
        self._finish(result.cycles, fault, bits, qread, counters=dict(result.counters or {}))

    def _fetch_stream(self) -> np.ndarray | None:
        if self._qsize % 4:
            return None
        data = self.memory.read(self._qbase, self._qsize) if self._qsize else b""
        return np.frombuffer(bytes(data), dtype="<u4").astype(np.uint32)

    def _finish(
        self, cycles: int, fault, bits: int, qread: int, record_fault: str | None = None, counters: dict | None = None
    ):
        self._qread = qread
        self._status = (self._status & ~STATUS_STATE_RUNNING) | bits | STATUS_IRQ_RAISED
        self.runs.append(RunRecord(self._qbase, self._qsize, self.basep(), cycles, fault or record_fault, counters))
        self._update_irq()

    def _count(self, result):
        if not self._pmcr & PMCR_CNT_EN:
            return
        overflow = 0
        if self._pmcnten & PMU_CYCLE_COUNTER:
            total = self._pmccntr + int(result.cycles)
            if total >> PMCCNTR_BITS:
                overflow |= PMU_CYCLE_COUNTER
            self._pmccntr = total & ((1 << PMCCNTR_BITS) - 1)
        for i in range(self.layout.event_counters):
            if not self._pmcnten & (1 << i):
                continue
            count = self._event_count(self._pmevtyper[i], result)
            total = self._pmevcntr[i] + count
            if total >> 32:
                overflow |= 1 << i
            self._pmevcntr[i] = total & MASK32
        if overflow:
            self._set_overflow(self._pmovs | overflow)

    @staticmethod
    def _event_count(event: int, result) -> int:
        if event in (EVENT_CYCLE, EVENT_NPU_ACTIVE):
            return int(result.cycles)
        name = EVENT_NAMES.get(event)
        if name is None:
            return 0
        return int((result.counters or {}).get(name, 0))


def _check_offset(offset: int, size: int):
    if not (0 <= offset < size and offset % 4 == 0):
        raise ValueError(f"NPU register offset {offset:#x} is not a word inside the {size:#x}-byte window")


def _array_index(offset: int, base: int, count: int) -> int | None:
    index = (offset - base) // 4
    return index if 0 <= index < count and offset >= base else None
