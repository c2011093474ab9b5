"""What both families' cycle estimates share: the interface a run feeds (CycleModel), and the
timing of the memory behind each region, as Vela reads it from its vela.ini for the system
config and memory mode the stream was compiled for (region 0, weights and constants:
const_mem_area; region 1, the scratch: arena_mem_area; region 2, the fast scratch:
cache_mem_area). Each family's estimate is its own (kiln.simulator.npu.u55.cycles,
kiln.simulator.npu.u85.cycles)."""

from __future__ import annotations

import configparser
import contextlib
import io
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from kiln.errors import NpuConfigError
from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.registers import Registers


class CycleModel(Protocol):
    """One family's cycle estimate over one run of a stream, fed its NPU_OP_* commands but
    STOP in stream order, each with the registers as the commands before it left them."""

    def account(self, command: Command, registers: Registers) -> float:
        """Adds `command`; returns the cycles it added to the estimate (may be negative where
        it changes the figure of an operation it continues)."""

    @property
    def estimate(self) -> float:
        """The cycles so far, unrounded; the run's PMU cycle count is its ceiling."""

    def counters(self) -> dict[str, int]:
        """The PMU counters the estimate keeps: cycles, mac_active, macs, dma_bytes, block_ops."""

    def costed_in(self) -> int | None:
        """The estimate's operation the last command was costed in, where commands share one
        (depth slices, chained elementwise); None for a command costed on its own or not at all."""


@dataclass(frozen=True)
class MemoryTiming:
    """What the estimate needs of one memory."""

    bandwidth: float  # bytes per NPU cycle
    burst: int  # longest burst, bytes
    read_latency: int  # NPU cycles
    write_latency: int  # NPU cycles
    ports: int = 1  # AXI ports the memory is reached through (its *_ports_used)
    max_reads: int = 1  # outstanding transactions the memory accepts (*_max_reads, *_max_writes)
    max_writes: int = 1


@cache
def region_memories(target: str, system_config: str, memory_mode: str) -> tuple[MemoryTiming, ...]:
    """Timing of the memory behind regions 0, 1 and 2 of streams Vela compiled for
    `target` with `system_config` and `memory_mode`; NpuConfigError if Vela does not know them."""
    from ethosu.vela.architecture_features import ArchitectureFeatures, MemPort
    from ethosu.vela.errors import VelaError

    from kiln.paths import vela_ini

    ini = str(vela_ini())
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Vela prints notes; stdout may be a UART
            arch = ArchitectureFeatures([ini], target, system_config, memory_mode, 3, False, None)
    except VelaError as error:
        raise NpuConfigError(
            f"kiln's NPU cycle model has no memory timing for {target} with system config "
            f"{system_config!r} and memory mode {memory_mode!r} ({error}); use a system config "
            f"and memory mode of {ini}"
        ) from None

    parser = configparser.ConfigParser()
    parser.read(ini)
    section = parser[f"System_Config.{system_config}"]

    def timing(port) -> MemoryTiming:
        area = arch.axi0_port if port == MemPort.Axi0 else arch.axi1_port
        read, write = (int(v) for v in arch.memory_latency[area])
        return MemoryTiming(
            float(arch.memory_bandwidths_per_cycle[area]),
            int(arch.memory_burst_length[area]),
            read,
            write,
            int(arch.memory_ports_used[area]),
            section.getint(f"{area.name}_max_reads", 1),
            section.getint(f"{area.name}_max_writes", 1),
        )

    return tuple(timing(port) for port in (arch.const_mem_area, arch.arena_mem_area, arch.cache_mem_area))


def memories_for(config: NpuConfig) -> tuple[MemoryTiming, ...]:
    """region_memories of `config` (compiled_for's system config and memory mode)."""
    return region_memories(config.target, *compiled_for(config))


def compiled_for(config: NpuConfig) -> tuple[str, str]:
    """(system config, memory mode) of the streams run on `config`: its own, or where unset
    the defaults the target's board description gives."""
    system_config, memory_mode = config.system_config, config.memory_mode
    if system_config is None or memory_mode is None:
        default_config, default_mode = _board_defaults(config.target)
        system_config = system_config or default_config
        memory_mode = memory_mode or default_mode
    return system_config, memory_mode


@cache
def _board_defaults(target: str) -> tuple[str, str]:
    """(system config, memory mode) the board description gives `target`."""
    from kiln import boards

    found = boards.target(target)
    return found.system_config, found.memory_mode
