"""Ethos-U55/U65/U85 configurations as the NPU reports them in its ID and CONFIG registers.

One place for these facts (Python side). The values are what Vela 5.2.0 (regor) writes
into a COP1 payload's optimizer-config action for each accelerator configuration
(measured). ID = version_status [3:0], version_minor [7:4], version_major [11:8],
product_major [15:12], arch_patch_rev [19:16], arch_minor_rev [27:20], arch_major_rev
[31:28] on every family.

CONFIG on Ethos-U55/U65: macs_per_cc (log2 of MACs per cycle, all cores) [3:0],
cmd_stream_version [7:4], shram_size (KiB, all cores) [15:8], product [31:28]
(0 = Ethos-U55, 1 = Ethos-U65).
CONFIG on Ethos-U85: macs_per_cc [3:0], cmd_stream_version [7:4] (1), num_axi_sram
(log2) [9:8], num_axi_ext (log2) [10], num_wd (log2 of cores) [13:12], custom_dma [27],
product [31:28] (2 = Ethos-U85). Measured for ethos-u85-128/256/512/1024/2048:
0x20000117, 0x20000118, 0x20001119, 0x2000251A, 0x2000261B; ID 0x20007000 (architecture
2.0.0, product_major 7, r0p0 status 0).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kiln.errors import NpuConfigError

# The ID register value of the modelled NPU: architecture 1.0.6, product_major 6,
# version r0p0 status 1 (the ID word regor writes into every COP1 payload).
ID_REGISTER = 0x1006_6001
ID_REGISTER_U85 = 0x2000_7000

PRODUCT_U55 = 0
PRODUCT_U65 = 1
PRODUCT_U85 = 2
U85_CMD_STREAM_VERSION = 1
U85_LUT_RAM_KIB = 2  # the LUT RAM, the only internal memory a U85 DMA writes


@dataclass(frozen=True)
class NpuConfig:
    """One accelerator configuration, e.g. ethos-u55-128."""

    target: str  # kiln's target name, e.g. "ethos-u55-128"
    product: int  # PRODUCT_U55, PRODUCT_U65 or PRODUCT_U85
    macs: int  # MACs per cycle per core
    cores: int  # 1, 2 (ethos-u65-512, ethos-u85-512) or 4 (ethos-u85-1024/2048)
    shram_kib: int  # SHRAM per core, KiB (Ethos-U85: its LUT RAM, U85_LUT_RAM_KIB)
    # The Vela system config and memory mode the command streams were compiled for; they
    # say which memory each region is in (only the cycle estimate reads them). None: the
    # default of the target's board description.
    system_config: str | None = None
    memory_mode: str | None = None
    axi_sram_log2: int = 0  # Ethos-U85: log2 of its AXI SRAM ports
    axi_ext_log2: int = 0  # Ethos-U85: log2 of its AXI EXT ports

    @property
    def is_u85(self) -> bool:
        return self.product == PRODUCT_U85

    @property
    def total_macs(self) -> int:
        """MACs per cycle of all cores (the number in the target's name)."""
        return self.macs * self.cores

    @property
    def config_register(self) -> int:
        macs_log2 = self.total_macs.bit_length() - 1
        if self.is_u85:
            cores_log2 = self.cores.bit_length() - 1
            return (
                (self.product << 28)
                | (cores_log2 << 12)
                | (self.axi_ext_log2 << 10)
                | (self.axi_sram_log2 << 8)
                | (U85_CMD_STREAM_VERSION << 4)
                | macs_log2
            )
        shram = self.shram_kib * self.cores
        return (self.product << 28) | (shram << 8) | (0 << 4) | macs_log2

    @property
    def id_register(self) -> int:
        return ID_REGISTER_U85 if self.is_u85 else ID_REGISTER

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
        NpuConfig("ethos-u85-128", PRODUCT_U85, 128, 1, U85_LUT_RAM_KIB, axi_sram_log2=1),
        NpuConfig("ethos-u85-256", PRODUCT_U85, 256, 1, U85_LUT_RAM_KIB, axi_sram_log2=1),
        NpuConfig("ethos-u85-512", PRODUCT_U85, 256, 2, U85_LUT_RAM_KIB, axi_sram_log2=1),
        NpuConfig("ethos-u85-1024", PRODUCT_U85, 256, 4, U85_LUT_RAM_KIB, axi_sram_log2=1, axi_ext_log2=1),
        NpuConfig("ethos-u85-2048", PRODUCT_U85, 512, 4, U85_LUT_RAM_KIB, axi_sram_log2=2, axi_ext_log2=1),
    )
}


def config_for(target: str, system_config: str | None = None, memory_mode: str | None = None) -> NpuConfig:
    """The configuration of a U55/U65/U85 target running streams Vela compiled with
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
