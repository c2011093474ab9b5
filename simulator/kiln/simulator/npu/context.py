"""What an operation sees while it runs: registers, memory, region bases, SHRAM, config."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.simulator.npu import featuremap
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.coverage import Coverage
from kiln.simulator.npu.registers import FeatureMap, Registers

LUT_BYTES = 2048  # the last 2 KiB of (each core's) SHRAM hold the activation LUTs
LUT_SLOT_BYTES = 256


@dataclass
class Context:
    registers: Registers
    memory: object  # a kiln.simulator.npu.Memory
    basep: tuple[int, ...]  # 8 region base addresses
    config: NpuConfig
    shram: bytearray  # one core's SHRAM, bytes; owned by the run
    coverage: Coverage
    cache: dict = field(default_factory=dict)  # decoded weights by stream content

    def region_base(self, region: int) -> int:
        return self.basep[region & 7]

    def read_fm(self, fm: FeatureMap, ys, xs, channels) -> np.ndarray:
        return featuremap.read(self.memory, fm, self.region_base(fm.region), ys, xs, channels)

    def write_fm(self, fm: FeatureMap, ys, xs, channels, values) -> None:
        featuremap.write(self.memory, fm, self.region_base(fm.region), ys, xs, channels, values)

    def read_region(self, region: int, offset: int, length: int) -> bytes:
        return bytes(self.memory.read(self.region_base(region) + offset, length))

    def lut_bytes(self, slot: int, length: int) -> bytes:
        start = len(self.shram) - LUT_BYTES + slot * LUT_SLOT_BYTES
        return bytes(self.shram[start:start + length])
