"""Ethos-U55/U65 configurations as the NPU reports them in its ID and CONFIG registers.

One place for these facts (Python side). The values are what Vela 5.2.0 (regor) writes
into a COP1 payload's optimizer-config action for each accelerator configuration
(measured), and the field layout of the two registers is the Ethos-U55/U65 register
map: CONFIG = macs_per_cc (log2 of MACs per cycle, all cores) [3:0],
cmd_stream_version [7:4], shram_size (KiB, all cores) [15:8], product [31:28]
(0 = Ethos-U55, 1 = Ethos-U65); ID = version_status [3:0], version_minor [7:4],
version_major [11:8], product_major [15:12], arch_patch_rev [19:16],
arch_minor_rev [27:20], arch_major_rev [31:28].
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kiln.errors import NpuConfigError

# The ID register value of the modelled NPU: architecture 1.0.6, product_major 6,
# version r0p0 status 1 (the ID word regor writes into every COP1 payload).
ID_REGISTER = 0x1006_6001

PRODUCT_U55 = 0
PRODUCT_U65 = 1


@dataclass(frozen=True)
class NpuConfig:
    """One accelerator configuration, e.g. ethos-u55-128."""

    target: str  # kiln's target name, e.g. "ethos-u55-128"
    product: int  # PRODUCT_U55 or PRODUCT_U65
    macs: int  # MACs per cycle per core
    cores: int  # 1, or 2 for ethos-u65-512
    shram_kib: int  # SHRAM per core, KiB
    # The Vela system config and memory mode the command streams were compiled for; they
    # say which memory each region is in (only the cycle estimate reads them). None: the
    # default of the target's board description.
    system_config: str | None = None
    memory_mode: str | None = None

    @property
    def config_register(self) -> int:
        macs_log2 = (self.macs * self.cores).bit_length() - 1
        shram = self.shram_kib * self.cores
        return (self.product << 28) | (shram << 8) | (0 << 4) | macs_log2

    @property
    def id_register(self) -> int:
        return ID_REGISTER

    @property
    def ofm_ublock_depth(self) -> int:
        """OFM channels in a MAC microblock (the weight stream's inner OFM grouping)."""
        return 4 if self.macs == 32 else 8

    @property
    def ifm_ublock_depth(self) -> int:
        """IFM channels in a MAC microblock (the weight stream's inner IFM grouping)."""
        return 8

    @property
    def shram_bytes(self) -> int:
        """SHRAM of one core, bytes."""
        return self.shram_kib * 1024


CONFIGS: dict[str, NpuConfig] = {
    c.target: c
    for c in (
        NpuConfig("ethos-u55-32", PRODUCT_U55, 32, 1, 16),
        NpuConfig("ethos-u55-64", PRODUCT_U55, 64, 1, 16),
        NpuConfig("ethos-u55-128", PRODUCT_U55, 128, 1, 24),
        NpuConfig("ethos-u55-256", PRODUCT_U55, 256, 1, 48),
        NpuConfig("ethos-u65-256", PRODUCT_U65, 256, 1, 48),
        NpuConfig("ethos-u65-512", PRODUCT_U65, 256, 2, 48),
    )
}


def config_for(target: str, system_config: str | None = None, memory_mode: str | None = None) -> NpuConfig:
    """The configuration of a U55/U65 target running streams Vela compiled with
    `system_config` and `memory_mode` (None: the board's defaults); NpuConfigError names
    the targets the model knows."""
    try:
        config = CONFIGS[target]
    except KeyError:
        raise NpuConfigError(
            f"kiln's NPU model has no configuration for target {target!r} (it models {', '.join(CONFIGS)}); "
            f"use one of those, or run {target} on Arm's FVP"
        ) from None
    return replace(config, system_config=system_config, memory_mode=memory_mode)
