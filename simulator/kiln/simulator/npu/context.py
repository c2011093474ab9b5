"""What an operation sees while it runs: registers, memory, region bases and sizes, SHRAM,
config.

Region sizes: when the firmware registered its buffers (`limits`: bytes per region, as
the driver publishes them; kiln.simulator.attach), every access an operation makes
through region(n) must lie inside [0, limits[n]) of region n, else RegionFault names it;
without limits (None) only the memory's own map bounds the access."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.errors import RegionFault
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
    shram: bytearray  # one core's SHRAM (Ethos-U85: its LUT RAM), bytes; owned by the run
    coverage: Coverage
    cache: dict = field(default_factory=dict)  # decoded weights by stream content
    limits: tuple[int, ...] | None = None  # bytes of each region's buffer; None: unchecked
    chained: dict = field(default_factory=dict)  # Ethos-U85 chaining buffers: index -> (H, W, C) array

    def region_base(self, region: int) -> int:
        return self.basep[region & 7]

    def region(self, region: int, what: str):
        """The memory as access `what` (e.g. "OFM write") of `region` may touch it."""
        if self.limits is None:
            return self.memory
        return _RegionView(self.memory, region & 7, self.region_base(region), self.limits[region & 7], what)

    def read_fm(self, fm: FeatureMap, ys, xs, channels, what: str = "IFM read") -> np.ndarray:
        return featuremap.read(self.region(fm.region, what), fm, self.region_base(fm.region), ys, xs, channels)

    def write_fm(self, fm: FeatureMap, ys, xs, channels, values, what: str = "OFM write") -> None:
        featuremap.write(self.region(fm.region, what), fm, self.region_base(fm.region), ys, xs, channels, values)

    def read_region(self, region: int, offset: int, length: int, what: str) -> bytes:
        return bytes(self.region(region, what).read(self.region_base(region) + offset, length))

    def lut_bytes(self, slot: int, length: int) -> bytes:
        start = len(self.shram) - LUT_BYTES + slot * LUT_SLOT_BYTES
        return bytes(self.shram[start:start + length])


class _RegionView:
    """`memory` limited to [base, base + limit): the buffer registered for one region."""

    def __init__(self, memory, region: int, base: int, limit: int, what: str):
        self._memory, self._region, self._base, self._limit, self._what = memory, region, base, limit, what

    def _check(self, address: int, size: int) -> None:
        offset = address - self._base
        if offset < 0 or offset + size > self._limit:
            raise RegionFault(self._what, self._region, offset, size, self._limit)

    def read(self, address: int, size: int):
        self._check(address, size)
        return self._memory.read(address, size)

    def write(self, address: int, data) -> None:
        size = data.nbytes if isinstance(data, np.ndarray) else len(memoryview(data).cast("B"))
        self._check(address, size)
        self._memory.write(address, data)
