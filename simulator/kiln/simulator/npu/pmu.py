"""AXI data beats for the PMU's event counters, from the bytes the NPU model moved.

The model counts, per run_stream, the bytes each operation read from and wrote to each
region (Context.traffic: feature-map elements, weight and scale streams, DMA source and
destination, each byte once per access the operation makes; a read-modify-write the
model does to keep bytes between elements is not counted). This module puts each region
on an AXI port and turns bytes into beats:

* Port. Regions sit where the cycle estimate (kiln.simulator.npu.cycles.memories_for)
  puts them: region 0 (weights, scales, constants) on Vela's const_mem_area, region 1
  (scratch) on arena_mem_area, region 2 (fast scratch) on cache_mem_area, any other region
  on the arena's port. Each *_mem_area is a Vela MemPort, Axi0 or Axi1, read from vela.ini's
  Memory_Mode section by Vela's own ArchitectureFeatures for the configuration's system
  config and memory mode (so the SRAM-only modes' constants move to Axi1 as Vela moves
  them). On the Ethos-U85 Axi0 is its SRAM port and Axi1 its external port (the PMU
  events SRAM_* and EXT_* have the U55/U65's AXI0_* and AXI1_* numbers).
* Beat. One beat is one AXI data transfer, the port's width: 8 bytes on the Ethos-U55
  (64-bit AXI), 16 on the Ethos-U65 and U85 (128-bit): Vela 5.2.0's
  architecture_features.py, axi_port_bytes_per_cycle 8.0 (U55) and 16.0 (U65, U85), a
  beat per port cycle. A port's beats for a run are ceil(its bytes / beat size) in each
  direction: the model does not know the hardware's bursts, so a real NPU, which reads
  an IFM block's halo more than once and moves whole bursts, counts at least as many.

Counter names are the pmu_event_type names kiln.simulator.npu.device.EVENT_NAMES gives
their event numbers (AXI0_RD_DATA_BEAT_RECEIVED 0x82, AXI0_WR_DATA_BEAT_WRITTEN 0x87,
AXI1_RD_DATA_BEAT_RECEIVED 0x182, AXI1_WR_DATA_BEAT_WRITTEN 0x187)."""

from __future__ import annotations

import contextlib
import io
from functools import cache

from kiln.errors import NpuConfigError
from kiln.simulator.npu.config import PRODUCT_U55, NpuConfig
from kiln.simulator.npu.cycles import compiled_for

BEAT_BYTES_U55 = 8
BEAT_BYTES_WIDE = 16  # Ethos-U65 and U85
READ, WRITE = "read", "write"
BEAT_COUNTERS = {
    (0, READ): "axi0_rd_data_beat_received", (0, WRITE): "axi0_wr_data_beat_written",
    (1, READ): "axi1_rd_data_beat_received", (1, WRITE): "axi1_wr_data_beat_written",
}  # fmt: skip


def beat_bytes(config: NpuConfig) -> int:
    """Bytes of one AXI data beat of `config`'s NPU."""
    return BEAT_BYTES_U55 if config.product == PRODUCT_U55 else BEAT_BYTES_WIDE


@cache
def _ports(target: str, system_config: str, memory_mode: str) -> tuple[int, int, int]:
    from ethosu.vela.architecture_features import ArchitectureFeatures, MemPort
    from ethosu.vela.errors import VelaError

    from kiln.paths import vela_ini

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Vela prints notes; stdout may be a UART
            arch = ArchitectureFeatures([str(vela_ini())], target, system_config, memory_mode, 3, False, None)
    except VelaError as error:
        raise NpuConfigError(
            f"kiln's NPU model has no AXI ports for {target} with system config "
            f"{system_config!r} and memory mode {memory_mode!r} ({error})"
        ) from None
    return tuple(
        0 if port == MemPort.Axi0 else 1 for port in (arch.const_mem_area, arch.arena_mem_area, arch.cache_mem_area)
    )


def region_ports(config: NpuConfig) -> tuple[int, ...]:
    """The AXI port (0 or 1) of regions 0..7 for streams Vela compiled for `config` (its
    unset system config or memory mode: the board's defaults, as the cycle estimate's)."""
    const, arena, cache_port = _ports(config.target, *compiled_for(config))
    return (const, arena, cache_port) + (arena,) * 5


def beat_counters(traffic: dict[tuple[int, str], int], config: NpuConfig) -> dict[str, int]:
    """The four AXI data-beat counters of a run whose bytes per (region, READ or WRITE) were
    `traffic`."""
    ports = region_ports(config)
    moved = dict.fromkeys(BEAT_COUNTERS, 0)
    for (region, direction), count in traffic.items():
        moved[(ports[region & 7], direction)] += count
    beat = beat_bytes(config)
    return {BEAT_COUNTERS[key]: -(-count // beat) for key, count in moved.items()}
