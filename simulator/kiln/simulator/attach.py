"""Attaching kiln's Ethos-U model to QEMU mps3-an547 through QEMU's gdbstub.

How an NPU register access reaches the model: QEMU starts halted with its
gdbstub on a Unix socket; the attachment sets an access watchpoint over the
NPU's register window (npu.device.window_size: 4 KiB, 5 KiB on the Ethos-U85; at
the board's npu.base, and at npu.ns_alias, the same registers through the
non-secure alias) and lets the CPU run. A
load or store there stops the CPU before the access with PC on the
instruction; the attachment decodes it (kiln.simulator.thumb: plain 32-bit
LDR/STR only), performs it on the register file (kiln.simulator.npu.device),
writes the loaded value or the base writeback into the CPU's registers and
moves PC past it. Pages without a watchpoint run at full speed, so firmware
that never touches the NPU is not slowed. An access takes two round trips to
QEMU: the registers, with the instruction read at the PCs that followed the last
access's PC before (a third when PC is elsewhere), then the register writes that
complete it, sent with the continue (kiln.simulator.gdb).

What the NPU reads and writes: QEMU's DDR is a shared memory file mapped
here, read and written in place; other memory (SRAM, TCMs) goes through gdb
m/M packets, cached in pages for the duration of one stream (the CPU is
stopped while the stream runs) and written back afterwards. Addresses outside
the board's memory regions are bus errors.

The buffers the firmware gives the NPU: the Ethos-U55/U65 have no region size
registers, so kiln's driver publishes each run's region sizes in its symbol
REGION_SIZES_SYMBOL (word 0 the number of regions, then one size per region; the
bases are BASEP's). When the ELF has that symbol, the attachment reads it at each
start and the NPU model refuses any access outside [BASEP<n>, BASEP<n> + size) as a
bus error naming the access (kiln.errors.RegionFault), independently of the driver's
own check of the stream at delegate init.

The completion interrupt: a debugger write to NVIC_ISPR is ignored by QEMU, so
the CPU itself pends it: the attachment puts a stub of two instructions over the
one it just emulated, `str r1, [r0]` (r0 the ISPR word, r1 the interrupt's bit)
then `ldr r2, [r2]` (r2 the NPU window), and lets the CPU continue. The CPU
takes the interrupt after the store (its handler's NPU accesses are served as
any others) and stops at the load, where the attachment restores memory and
registers as the emulated access left them. The stub runs, not single-steps:
QEMU 7.2 drops all its translated code at every single step, which cost each
inference a retranslation of the firmware (about 10 ms of QEMU's time per
decode step of a language model).

Booting where the board boots: QEMU's machine reads the initial SP and PC from its
own fixed vector table address (QEMU_BOOT_VECTORS; mps3-an547's board code sets it,
so no option moves it), while a board's CPU boots at its code region's base (the
SSE-320 at 0x1100_0000). When the two differ, the attachment (BootAttachment, the
base of NpuAttachment) loads SP and PC from the board's vector table through the
gdbstub before the first instruction, as the board's reset would.
"""

from __future__ import annotations

import mmap
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln import boards
from kiln.errors import AttachmentError, BoardError
from kiln.simulator import thumb
from kiln.simulator.gdb import PIPELINE, WRITE_CHUNK, GdbClient
from kiln.simulator.npu.config import NpuConfig, config_for
from kiln.simulator.npu.device import EthosU, window_size
from kiln.simulator.npu.memory import MemoryFault

REGION_SIZES_SYMBOL = "kiln_npu_region_sizes"  # firmware/drivers/ethosu/driver.cpp
REGIONS = 8

# QEMU mps3-an547's DDR: one RAM of exactly 2 GiB at 0x6000_0000 (both security
# aliases of the board's DDR lie inside it); its memory backend can be a file.
QEMU_DDR_BASE = 0x6000_0000
QEMU_DDR_SIZE = 2 << 30
NVIC_ISPR = 0xE000_E200  # Armv8-M: set-pending registers, one bit per interrupt
# The interrupt stub: Thumb `str r1, [r0]` then `ldr r2, [r2]`; it stops before the load.
PEND_STUB = (0x6001).to_bytes(2, "little") + (0x6812).to_bytes(2, "little")
STUB_STOP = 2  # the load's offset in the stub
CONNECT_TIMEOUT_S = 10.0
# Where each QEMU machine's CPU reads its vector table at reset (its INITSVTOR).
QEMU_BOOT_VECTORS = {
    "mps3-an547": 0x1000_0000,
    "mps2-an386": 0x0000_0000,  # an Armv7-M core: VTOR resets to 0
    "mps2-an500": 0x0000_0000,
    "mps2-an505": 0x1000_0000,  # the SSE-200's INITSVTOR0 reset value (QEMU's init-svtor)
}
THUMB_STATE = 1 << 24  # xPSR.T: M-profile code always runs in Thumb state
PAGE = 4096  # bytes; the unit the gdb-backed memory caches
SUCCESSORS = 4  # PCs remembered as following an access's PC


class SharedDdr:
    """QEMU's DDR as a sparse shared file; the host maps it. Only pages the target
    touches take space: in /dev/shm when it has room for SHM_ROOM bytes (a small
    container /dev/shm would make QEMU die of SIGBUS), else in the temp directory."""

    def __init__(self):
        fd, path = tempfile.mkstemp(prefix="kiln-ddr-", dir=_ddr_directory())
        self.path = Path(path)
        try:
            os.ftruncate(fd, QEMU_DDR_SIZE)
            self._map = mmap.mmap(fd, QEMU_DDR_SIZE)
        finally:
            os.close(fd)
        self.view = memoryview(self._map)

    def qemu_args(self, machine: str) -> list[str]:
        return [
            "-M", f"{machine},memory-backend=kiln-ddr",
            "-object", f"memory-backend-file,id=kiln-ddr,size={QEMU_DDR_SIZE},mem-path={self.path},share=on",
        ]  # fmt: skip

    def close(self):
        """Unmaps and deletes the file; safe to call twice. Views handed out become invalid."""
        if self._map.closed:
            return
        self.path.unlink(missing_ok=True)
        try:
            self.view.release()
            self._map.close()
        except BufferError:
            pass  # a slice handed to the executor is still alive: the mapping goes with it


SHM_ROOM = 1 << 30  # bytes


def _ddr_directory() -> str:
    try:
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize >= SHM_ROOM:
            return "/dev/shm"
    except OSError:
        pass
    return tempfile.gettempdir()


class TargetMemory:
    """The NPU's view of the target's memory (a kiln.simulator.npu Memory).

    Bus addresses inside QEMU's DDR go to the shared file; inside another of the
    board's regions (whole pages; an access lies inside one region) to a page cache
    over gdb (begin() empties it, flush() writes dirty pages back); elsewhere they
    raise MemoryFault. A cached page lies inside a region, so an access inside one needs
    no other check. A stream's first missing page is fetched with every page the
    stream before had cached (a firmware runs the same streams over the same buffers),
    in one round trip."""

    def __init__(self, gdb: GdbClient, regions: list[tuple[int, int]], ddr: memoryview | None):
        for base, length in regions:
            if base % PAGE or length % PAGE:
                raise ValueError(f"memory region {base:#x}+{length:#x} is not a whole number of {PAGE}-byte pages")
        self._gdb = gdb
        self._regions = sorted(regions)
        self._ddr = ddr
        self._pages: dict[int, bytearray] = {}
        self._dirty: set[int] = set()
        self._expected: list[int] = []  # pages the stream before had cached, to fetch at the first miss
        self.bytes_read = 0  # through gdb, since creation
        self.bytes_written = 0

    def begin(self):
        if self._pages:  # what the last access that touched memory (a stream) had cached
            self._expected = sorted(self._pages)
        self._pages.clear()
        self._dirty.clear()

    def read(self, address: int, size: int):
        if self._in_ddr(address, size):
            offset = address - QEMU_DDR_BASE
            return self._ddr[offset : offset + size]
        page, offset = divmod(address, PAGE)
        if offset + size <= PAGE and page in self._pages:  # a cached page lies inside a region
            return bytes(self._pages[page][offset : offset + size])
        self._check(address, size, "read")
        self._load(address, size, whole_pages_written=False)
        return self._gather(address, size)

    def write(self, address: int, data):
        raw = memoryview(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data).cast("B")
        size = len(raw)
        if self._in_ddr(address, size):
            offset = address - QEMU_DDR_BASE
            self._ddr[offset : offset + size] = raw
            return
        page, offset = divmod(address, PAGE)
        if offset + size <= PAGE and page in self._pages:  # a cached page lies inside a region
            self._pages[page][offset : offset + size] = raw
            self._dirty.add(page)
            return
        self._check(address, size, "write")
        self._load(address, size, whole_pages_written=True)
        position = 0
        while position < size:
            page, offset = divmod(address + position, PAGE)
            n = min(PAGE - offset, size - position)
            self._pages[page][offset : offset + n] = raw[position : position + n]
            self._dirty.add(page)
            position += n

    def flush(self, defer: int = 0) -> list[str]:
        """Writes the pages the NPU wrote back into the target, in contiguous runs; when that
        takes at most `defer` packets, returns them instead, for the caller to send before the
        CPU runs again."""
        runs = [(first, b"".join(self._pages[p] for p in range(first, first + count)))
                for first, count in _runs(sorted(self._dirty))]  # fmt: skip
        self._dirty.clear()
        self.bytes_written += sum(len(data) for _, data in runs)
        if sum(-(-len(data) // WRITE_CHUNK) for _, data in runs) <= defer:
            return [packet for first, data in runs for packet in self._gdb.memory_writes(first * PAGE, data)]
        for first, data in runs:
            self._gdb.write_memory(first * PAGE, data)
        return []

    def peek(self, address: int, size: int) -> bytes | None:
        """The bytes at [address, address + size) as the NPU left them, where they are in the
        shared DDR or a cached page (one page); None elsewhere (the NPU did not touch them)."""
        if self._in_ddr(address, size):
            return bytes(self.read(address, size))
        page, offset = divmod(address, PAGE)
        if page in self._pages and offset + size <= PAGE:
            return bytes(self._pages[page][offset : offset + size])
        return None

    # ---------------------------------------------------------------- helpers

    def _in_ddr(self, address: int, size: int) -> bool:
        return self._ddr is not None and QEMU_DDR_BASE <= address and address + size <= QEMU_DDR_BASE + QEMU_DDR_SIZE

    def _check(self, address: int, size: int, access: str):
        if not any(base <= address and address + size <= base + length for base, length in self._regions):
            raise MemoryFault(address, size, access)

    def _load(self, address: int, size: int, whole_pages_written: bool):
        """Fetches the missing pages that [address, address + size) touches."""
        first, last = address // PAGE, (address + size - 1) // PAGE
        missing = [p for p in range(first, last + 1) if p not in self._pages]
        if whole_pages_written:
            # Pages the write covers entirely need no fetch, only a blank page to write into.
            covered = [p for p in missing if address <= p * PAGE and (p + 1) * PAGE <= address + size]
            for p in covered:
                self._pages[p] = bytearray(PAGE)
            missing = [p for p in missing if p not in self._pages]
        if missing and self._expected:
            self._fetch([p for p in self._expected if p not in self._pages], prefetch=True)
            self._expected = []
            missing = [p for p in missing if p not in self._pages]
        self._fetch(missing)

    def _fetch(self, pages: list[int], prefetch: bool = False):
        """Reads `pages` into the cache, each run of them with its requests in flight together;
        a page that does not read is a MemoryFault, or skipped when only `prefetch`ed."""
        if not pages:
            return
        runs = _runs(pages)
        for (first, count), chunk in zip(runs, self._gdb.read_runs([(f * PAGE, n * PAGE) for f, n in runs])):
            if chunk is None:
                if prefetch:
                    continue
                raise MemoryFault(first * PAGE, count * PAGE, "read")
            self.bytes_read += len(chunk)
            for i in range(count):
                self._pages[first + i] = bytearray(chunk[i * PAGE : (i + 1) * PAGE])

    def _gather(self, address: int, size: int) -> bytes:
        first, offset = divmod(address, PAGE)
        if offset + size <= PAGE:
            return bytes(self._pages[first][offset : offset + size])
        last = (address + size - 1) // PAGE
        data = b"".join(self._pages[p] for p in range(first, last + 1))
        return data[offset : offset + size]


def _runs(pages: list[int]) -> list[tuple[int, int]]:
    """Consecutive page numbers grouped as (first, count)."""
    runs: list[tuple[int, int]] = []
    for p in pages:
        if runs and runs[-1][0] + runs[-1][1] == p:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((p, 1))
    return runs


def region_sizes_address(elf: Path) -> int | None:
    """Where the firmware publishes its NPU region sizes (REGION_SIZES_SYMBOL), or None
    when the ELF has no such symbol (firmware without kiln's driver)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with open(elf, "rb") as stream:
        for section in ELFFile(stream).iter_sections():
            if isinstance(section, SymbolTableSection):
                for symbol in section.get_symbol_by_name(REGION_SIZES_SYMBOL) or ():
                    return int(symbol["st_value"])
    return None


def _register_name(index: int) -> str:
    return {13: "sp", 14: "lr", 15: "pc"}.get(index, f"r{index}")


def boots_elsewhere(board: boards.Board) -> bool:
    """Whether `board`'s CPU boots at another vector table than its QEMU machine's."""
    if board.qemu_machine not in QEMU_BOOT_VECTORS:
        raise BoardError(
            f"{board.path}: virtual_platform.qemu_machine: kiln's virtual platform does not know QEMU "
            f"machine {board.qemu_machine!r} (known: {', '.join(QEMU_BOOT_VECTORS)})"
        )
    return board.region_for("code").base != QEMU_BOOT_VECTORS[board.qemu_machine]


@dataclass(frozen=True)
class HostTimes:
    """Where the wall time of a run on the virtual platform went, in seconds, as the NPU
    attachment clocks it; the rest of the run's wall time is QEMU starting and loading the
    ELF, and ending."""

    running: float  # the CPU running (QEMU) until an NPU register access or its end, each stop's round trip included
    accesses: float  # serving the accesses: the attachment's gdb traffic and the NPU model's work
    streams: float  # of `accesses`, the NPU model running command streams
    # The CPU time of the attachment's own thread (time.thread_time) in `accesses` and `streams`:
    # what the work took on a loaded machine, where wall time also counts the waits for a core.
    accesses_cpu: float = 0.0
    streams_cpu: float = 0.0

    @property
    def attachment(self) -> float:
        """Serving the accesses but for the streams: gdb traffic, instruction decoding, registers."""
        return self.accesses - self.streams


class BootAttachment:
    """QEMU halted at start with its gdbstub on a private socket: boots the CPU at the
    board's vector table if the machine's differs, then lets it run to the end."""

    def __init__(self, board: boards.Board):
        self.board = board
        # The board's vector table, when QEMU's machine boots from another (else None).
        self._vectors = board.region_for("code").base if boots_elsewhere(board) else None
        self._socket_dir = Path(tempfile.mkdtemp(prefix="kiln-gdb-"))
        self.socket_path = self._socket_dir / "gdb.sock"
        self.device: EthosU | None = None  # no NPU model here
        self.accesses = 0  # intercepted NPU register accesses

    def qemu_args(self) -> list[str]:
        """QEMU arguments: the machine and a halted CPU with a gdbstub on our socket."""
        return ["-M", self.board.qemu_machine, *self._gdbstub_args()]

    def _gdbstub_args(self) -> list[str]:
        return [
            "-chardev", f"socket,id=kiln-gdb,path={self.socket_path},server=on,wait=off",
            "-gdb", "chardev:kiln-gdb",
            "-S",
        ]  # fmt: skip

    def connect(self, alive) -> socket.socket:
        """Connects to QEMU's gdbstub once it listens; `alive()` says whether QEMU still runs."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while time.monotonic() < deadline and alive():
            if self.socket_path.exists():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(str(self.socket_path))
                    return sock
                except OSError:
                    sock.close()
            time.sleep(0.002)
        raise AttachmentError("QEMU's gdbstub did not come up (QEMU exited or did not listen)")

    def serve(self, sock: socket.socket):
        """Boots the CPU (boot) and runs it until the firmware ends."""
        gdb = GdbClient(sock)
        gdb.read_target_description()
        self.boot(gdb)
        self._run(gdb)

    def boot(self, gdb: GdbClient):
        """Loads SP and PC from the vector table at the board's code region base, as the
        board's reset does, when QEMU's machine booted from another address."""
        if self._vectors is None:
            return
        raw = gdb.read_memory(self._vectors, 8)
        sp, pc = int.from_bytes(raw[:4], "little"), int.from_bytes(raw[4:], "little")
        gdb.write_registers({"sp": sp, "pc": pc & ~1, "xpsr": THUMB_STATE})

    def _run(self, gdb: GdbClient):
        stop = gdb.cont()
        if not stop.exited:
            raise AttachmentError("the CPU stopped under the debugger for no reason kiln set")

    def host_times(self) -> HostTimes | None:
        """Where the run's wall time went (None: no NPU model, nothing clocked)."""
        return None

    def close(self):
        """Removes the socket; safe to call twice."""
        self.socket_path.unlink(missing_ok=True)
        if self._socket_dir.exists():
            self._socket_dir.rmdir()


@dataclass(frozen=True)
class _Stub:
    """The interrupt stub in the target's code: where, the bytes it covers, and the registers
    (gdb names) to restore at its stop."""

    at: int
    saved: bytes
    restored: dict[str, int]


class NpuAttachment(BootAttachment):
    """Serves the NPU's register window of one QEMU run (see the module's docstring)."""

    def __init__(self, target: boards.Target, executor=None, hang: bool = False, elf: Path | None = None):
        super().__init__(target.board)
        self.config: NpuConfig = config_for(target.name)
        self.window_size = window_size(self.config)  # bytes of the NPU's register window (U85: 0x1400)
        self._executor = executor
        self._hang = hang  # see EthosU: streams never finish (tests of firmware timeouts)
        self.ddr = SharedDdr()
        self.memory: TargetMemory | None = None
        self.access_time_s = 0.0  # host time spent on register accesses, including the NPU's runs
        self.npu_time_s = 0.0  # host time spent running streams
        self.running_time_s = 0.0  # host time the CPU ran between accesses (HostTimes.running)
        self.access_cpu_s = 0.0  # CPU time of this thread serving accesses (HostTimes.accesses_cpu)
        self.npu_cpu_s = 0.0  # of that, running streams (HostTimes.streams_cpu)
        self._irq_rising = False
        self._region_sizes_at = region_sizes_address(elf) if elf is not None else None
        self._successors: dict[int | None, list[int]] = {}  # an access's PC -> PCs of the next access
        self._last_pc: int | None = None  # the last access's PC
        self._stub: _Stub | None = None  # the interrupt stub the CPU is to run, until its stop

    def qemu_args(self) -> list[str]:
        """QEMU arguments: the shared DDR and a halted CPU with a gdbstub on our socket."""
        return [*self.ddr.qemu_args(self.board.qemu_machine), *self._gdbstub_args()]

    def _run(self, gdb: GdbClient):
        """Runs the CPU until the firmware ends, serving every NPU register access."""
        regions = [(r.base, r.size) for r in self.board.memory]
        self.memory = TargetMemory(gdb, regions, self.ddr.view)
        sizes = self._region_sizes if self._region_sizes_at is not None else None
        self.device = EthosU(
            self.config,
            self.memory,
            executor=self._executor,
            on_irq=self._irq_changed,
            hang=self._hang,
            region_sizes=sizes,
        )
        for window in self.board.npu.windows:
            gdb.watch(window, self.window_size)
        completing: list[str] = []  # the writes that complete the last access
        while True:
            started = time.perf_counter()
            stop = gdb.cont(completing)
            self.running_time_s += time.perf_counter() - started
            if stop.exited:
                return
            if stop.watch is None:
                raise AttachmentError("the CPU stopped without hitting the NPU watchpoint")
            started, started_cpu = time.perf_counter(), time.thread_time()
            completing, access = self._emulate(gdb)
            self.access_time_s += time.perf_counter() - started
            self.access_cpu_s += time.thread_time() - started_cpu
            self.accesses += access

    def _region_sizes(self) -> tuple[int, ...]:
        """The sizes the driver published for the run it is starting (0: no buffer)."""
        raw = bytes(self.memory.read(self._region_sizes_at, 4 * (1 + REGIONS)))
        words = np.frombuffer(raw, "<u4")
        count = min(int(words[0]), REGIONS)
        return tuple(int(words[1 + n]) if n < count else 0 for n in range(REGIONS))

    def host_times(self) -> HostTimes:
        return HostTimes(self.running_time_s, self.access_time_s, self.npu_time_s, self.access_cpu_s, self.npu_cpu_s)

    def close(self):
        """Removes the shared DDR file and the socket; safe to call twice."""
        self.ddr.close()
        super().close()

    # ---------------------------------------------------------------- one access

    def _emulate(self, gdb: GdbClient) -> tuple[list[str], bool]:
        """Performs the access the CPU stopped before; returns the writes that complete it (the
        loaded value or base writeback, PC past the instruction; when it raised the interrupt,
        the interrupt stub's code and registers), for gdb to send before the CPU continues, and
        True. At the interrupt stub's stop: the writes that restore what the stub borrowed, and
        False (no register access)."""
        registers, xpsr, code = self._read_state(gdb)
        pc = registers[thumb.PC]
        stub = self._stub
        if stub is not None:
            if pc == stub.at + STUB_STOP:
                self._stub = None
                return [gdb.memory_write(stub.at, stub.saved), *gdb.register_writes(stub.restored)], False
            if stub.at <= pc < stub.at + len(PEND_STUB):
                raise AttachmentError(
                    f"the CPU ran the interrupt stub at {stub.at:#010x} from an interrupt handler (PC {pc:#010x})"
                )
        hw1, hw2 = int.from_bytes(code[:2], "little"), int.from_bytes(code[2:], "little")
        try:
            access = thumb.decode(hw1, hw2)
        except thumb.UnsupportedAccess as error:
            raise AttachmentError(f"NPU register access at PC {pc:#010x}: {error}") from None
        address = access.address(registers)
        offset = next((address - w for w in self.board.npu.windows if 0 <= address - w < self.window_size), None)
        if offset is None or offset % 4:
            raise AttachmentError(
                f"NPU register access at PC {pc:#010x} to {address:#010x} is not an aligned word "
                f"inside the NPU window at {self.board.npu.base:#010x}"
            )
        writes: dict[int, int] = {}  # register number -> new value
        memory: list[str] = []  # the NPU's writes to the target's memory, not yet sent
        if access.load:
            writes[access.rt] = self.device.read(offset)
        else:
            memory = self._store(offset, registers[access.rt])
        if access.writeback:
            writes[access.rn] = access.base_after(registers)
        writes[thumb.PC] = pc + access.size
        named = {_register_name(number): value for number, value in writes.items()}
        new_xpsr = thumb.advance_itstate(xpsr)
        if new_xpsr != xpsr:
            named["xpsr"] = new_xpsr
        if not self._irq_rising:
            return [*memory, *gdb.register_writes(named)], True
        self._irq_rising = False
        after = {**registers, **writes}
        return [*memory, *self._pend_interrupt(gdb, pc & ~1, code, after, new_xpsr)], True

    def _store(self, offset: int, value: int) -> list[str]:
        """Performs a store; returns the writes of what the NPU wrote to the target's memory
        through gdb, when few (PIPELINE packets; more are written at once)."""
        self.memory.begin()
        started, started_cpu = time.perf_counter(), time.thread_time()
        self.device.write(offset, value)
        memory = self.memory.flush(defer=PIPELINE)
        self.npu_time_s += time.perf_counter() - started
        self.npu_cpu_s += time.thread_time() - started_cpu
        return memory

    def _read_state(self, gdb: GdbClient) -> tuple[dict[int, int], int, bytes]:
        """r0..r15, xPSR (one 'g' packet: QEMU's M-profile layout is 16 words, then xPSR)
        and the 4 bytes at PC. The driver makes its accesses from few places, in the same
        order every inference, so the code is read with the registers at each PC that
        followed the last access's before (SUCCESSORS of them, the latest first), and after
        them only when PC is none of those."""
        guesses = self._successors.setdefault(self._last_pc, [])
        raw, codes = gdb.read_all_registers([(guess, 4) for guess in guesses])
        if len(raw) < 17 * 4:
            raise AttachmentError(f"unexpected register packet of {len(raw)} bytes")
        words = [int.from_bytes(raw[4 * i : 4 * i + 4], "little") for i in range(17)]
        pc = words[15] & ~1
        code = codes[guesses.index(pc)] if pc in guesses else None
        if code is None:
            code = gdb.read_memory(pc, 4)
        if pc in guesses:
            guesses.remove(pc)
        guesses.insert(0, pc)
        del guesses[SUCCESSORS:]
        self._last_pc = pc
        return dict(enumerate(words[:16])), words[16], code

    def _irq_changed(self, level: bool):
        if level:
            self._irq_rising = True

    def _pend_interrupt(
        self, gdb: GdbClient, stub_at: int, code: bytes, registers: dict[int, int], xpsr: int
    ) -> list[str]:
        """The writes that have the CPU pend the NPU's interrupt in its NVIC when it continues:
        the interrupt stub (PEND_STUB) over the access at `stub_at`, and its registers. What
        restores the state after it (`registers` and `xpsr` as the access left them, and the
        code the stub covers) is kept for the stub's stop. `code`: the bytes at stub_at before
        the access, which is what is there now unless the NPU wrote them (then the NPU's)."""
        irq = self.board.npu.irq
        saved = self.memory.peek(stub_at, len(PEND_STUB)) or code[: len(PEND_STUB)]
        outside_it_block = xpsr & ~((0x3F << 10) | (0x3 << 25))
        stub = {
            "r0": NVIC_ISPR + 4 * (irq // 32),
            "r1": 1 << (irq % 32),
            "r2": self.board.npu.base,
            "pc": stub_at,
            "xpsr": outside_it_block,
        }
        restored = {"r0": registers[0], "r1": registers[1], "r2": registers[2], "pc": registers[thumb.PC], "xpsr": xpsr}
        self._stub = _Stub(stub_at, saved, restored)
        return [gdb.memory_write(stub_at, PEND_STUB), *gdb.register_writes(stub)]
