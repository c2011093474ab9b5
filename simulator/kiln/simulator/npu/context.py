"""What an operation sees while it runs: registers, memory, region bases and sizes, SHRAM,
config.

Region sizes: when the firmware registered its buffers (`limits`: bytes per region, as
the driver publishes them; kiln.simulator.attach), every access an operation makes
through region(n) must lie inside [0, limits[n]) of region n, else RegionFault names it;
without limits (None) only the memory's own map bounds the access.

Traffic: every access through region(n), read_fm, write_fm and read_region adds its bytes
to traffic[(n, "read" or "write")], what the PMU's AXI beat counters count
(kiln.simulator.npu.pmu). A feature map counts its elements' bytes, not the span the model
reads to gather them or reads back to keep the bytes between them."""

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
    limits: tuple[int, ...] | None = None  # bytes of each region's buffer; None: unchecked
    chained: dict = field(default_factory=dict)  # Ethos-U85 chaining buffers: index -> (H, W, C) array
    traffic: dict = field(default_factory=dict)  # (region, "read" | "write") -> bytes moved

    def region_base(self, region: int) -> int:
        return self.basep[region & 7]

    def region(self, region: int, what: str):
        """The memory as access `what` (e.g. "OFM write") of `region` may touch it; what is
        read and written through it counts as the region's traffic."""
        return self._view(region, what, self.traffic)

    def _view(self, region: int, what: str, traffic: dict | None):
        limit = None if self.limits is None else self.limits[region & 7]
        return _RegionView(self.memory, region & 7, self.region_base(region), limit, what, traffic)

    def count(self, region: int, direction: str, size: int) -> None:
        key = (region & 7, direction)
        self.traffic[key] = self.traffic.get(key, 0) + int(size)

    def fm_plan(self, fm: FeatureMap, ys, xs, channels) -> featuremap.Plan:
        """Where the elements at rows ys, columns xs, channels `channels` of `fm` lie (a
        function of the registers and the region's base alone)."""
        return featuremap.plan(fm, self.region_base(fm.region), ys, xs, channels)

    def read_fm(self, fm: FeatureMap, ys, xs, channels, what: str = "IFM read") -> np.ndarray:
        return self.read_planned(fm, self.fm_plan(fm, ys, xs, channels), what)

    def read_planned(self, fm: FeatureMap, plan: featuremap.Plan, what: str, dtype=None) -> np.ndarray:
        """The elements of `fm` where `plan` (fm_plan's) puts them, (H, W, C), as `dtype` (None:
        fm.dtype); a new array."""
        values = featuremap.read(self._view(fm.region, what, None), fm, plan, dtype)
        self.count(fm.region, "read", values.size * fm.elem_size)
        return values

    def write_fm(self, fm: FeatureMap, ys, xs, channels, values, what: str = "OFM write") -> None:
        self.write_planned(fm, self.fm_plan(fm, ys, xs, channels), values, what)

    def write_planned(self, fm: FeatureMap, plan: featuremap.Plan, values, what: str) -> None:
        """Stores `values` (H, W, C) where `plan` (fm_plan's) puts the elements of `fm`."""
        featuremap.write(self._view(fm.region, what, None), fm, plan, values)
        self.count(fm.region, "write", np.size(values) * fm.elem_size)

    def read_region(self, region: int, offset: int, length: int, what: str) -> bytes:
        return bytes(self.region(region, what).read(self.region_base(region) + offset, length))

    def lut_bytes(self, slot: int, length: int) -> bytes:
        start = len(self.shram) - LUT_BYTES + slot * LUT_SLOT_BYTES
        return bytes(self.shram[start : start + length])


class _RegionView:
    """`memory` limited to [base, base + limit) (limit None: unchecked), the buffer registered
    for one region; counts the bytes read and written in `traffic` unless that is None."""

    def __init__(self, memory, region: int, base: int, limit: int | None, what: str, traffic: dict | None):
        self._memory, self._region, self._base, self._limit, self._what = memory, region, base, limit, what
        self._traffic = traffic

    def _check(self, address: int, size: int, direction: str) -> None:
        offset = address - self._base
        if self._limit is not None and (offset < 0 or offset + size > self._limit):
            raise RegionFault(self._what, self._region, offset, size, self._limit)
        if self._traffic is not None:
            key = (self._region, direction)
            self._traffic[key] = self._traffic.get(key, 0) + size

    def read(self, address: int, size: int):
        self._check(address, size, "read")
        return self._memory.read(address, size)

    def write(self, address: int, data) -> None:
        size = data.nbytes if isinstance(data, np.ndarray) else len(memoryview(data).cast("B"))
        self._check(address, size, "write")
        self._memory.write(address, data)
