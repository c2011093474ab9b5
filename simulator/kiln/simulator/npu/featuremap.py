"""Reading and writing feature maps in NPU memory (NHWC or NHCWB16, up to four tiles).

A feature map's element (y, x, c) lives at region base + tile base + y * stride_y
+ x * stride_x' + (c // 16) * stride_c' + (c % 16) * element size, where for NHWC
stride_x' = STRIDE_X and stride_c' = 16 * element size (so c * element size), and for
NHCWB16 (bricks of 16 channels) stride_x' = 16 * element size and stride_c' = STRIDE_C.
Tiles: columns x >= WIDTH0 are in tile 1 (rows < HEIGHT1) or tile 3 (rows >= HEIGHT1,
counted from HEIGHT1); columns x < WIDTH0 are in tile 0 (rows < HEIGHT0) or tile 2
(rows >= HEIGHT0, counted from HEIGHT0); x and y count from the tile's origin.

Where the elements of an access lie (its plan: the span of bytes holding them and each
element's offset in it) depends on the feature map's registers, the region's base and the
positions alone, so plans are kept (PLAN_BYTES of them) by those. Elements that fill their
span in order (dense) are read and written as one block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import RegionFault
from kiln.simulator.npu.memo import BoundedCache
from kiln.simulator.npu.memory import MemoryFault
from kiln.simulator.npu.registers import FORMAT_NHCWB16, FeatureMap

BRICK = 16
PLAN_BYTES = 256 << 20  # bytes of plans kept


def _tile_offsets(fm: FeatureMap, ys: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tile index, byte offset of channel 0 from the tile base), both shaped (len(ys), len(xs))."""
    y = ys[:, None].astype(np.int64) + np.zeros((1, len(xs)), np.int64)
    x = xs[None, :].astype(np.int64) + np.zeros((len(ys), 1), np.int64)
    right = x >= fm.width0
    tile = np.where(right, np.where(y >= fm.height1, 3, 1), np.where(y >= fm.height0, 2, 0))
    x = np.where(right, x - fm.width0, x)
    y = np.where(tile == 3, y - fm.height1, np.where(tile == 2, y - fm.height0, y))
    stride_x = BRICK * fm.elem_size if fm.layout == FORMAT_NHCWB16 else fm.stride_x
    return tile, y * fm.stride_y + x * stride_x


def _channel_offsets(fm: FeatureMap, channels: np.ndarray) -> np.ndarray:
    c = channels.astype(np.int64)
    stride_c = fm.stride_c if fm.layout == FORMAT_NHCWB16 else BRICK * fm.elem_size
    return (c // BRICK) * stride_c + (c % BRICK) * fm.elem_size


def addresses(fm: FeatureMap, region_base: int, ys, xs, channels) -> np.ndarray:
    """Bus address of every element, shaped (len(ys), len(xs), len(channels))."""
    ys, xs, channels = (np.asarray(a, np.int64) for a in (ys, xs, channels))
    tile, position = _tile_offsets(fm, ys, xs)
    bases = np.asarray(fm.bases, np.int64)[tile] + region_base
    return (bases + position)[:, :, None] + _channel_offsets(fm, channels)[None, None, :]


def _span(address: np.ndarray, elem_size: int) -> tuple[int, int]:
    lo = int(address.min())
    return lo, int(address.max()) + elem_size - lo


def _byte_index(address: np.ndarray, lo: int, elem_size: int) -> np.ndarray:
    return (address - lo)[..., None] + np.arange(elem_size, dtype=np.int64)


@dataclass(frozen=True)
class Plan:
    """Where an access's elements lie: the span [lo, lo + length) holding them (length 0: no
    element) and the offset from lo of each element's bytes, (H, W, C) for 1-byte elements
    and (H, W, C, size) for wider ones; None when the elements fill the span in order."""

    shape: tuple[int, ...]  # (H, W, C)
    lo: int
    length: int
    index: np.ndarray | None  # read-only
    covers: bool = True  # every byte of the span is one of the elements': a write keeps none between them


_plans = BoundedCache(PLAN_BYTES)


def plan(fm: FeatureMap, region_base: int, ys, xs, channels) -> Plan:
    """Where the elements at rows ys, columns xs, channels `channels` (each a range or a 1-D
    integer array) of `fm` lie, its region at bus address region_base."""
    key = (fm, region_base, *(_position_key(p) for p in (ys, xs, channels)))
    plan = _plans.get(key)
    if plan is not None:
        return plan
    address = addresses(fm, region_base, ys, xs, channels)
    size = fm.elem_size
    if address.size == 0:
        plan = Plan(address.shape, 0, 0, None)
    else:
        lo, length = _span(address, size)
        dense = length == address.size * size and np.array_equal(
            address.reshape(-1) - lo, np.arange(address.size, dtype=np.int64) * size
        )
        index = None if dense else (address - lo if size == 1 else _byte_index(address, lo, size))
        covers = True
        if index is not None:
            index.flags.writeable = False
            covers = np.unique(index).size == length
        plan = Plan(address.shape, lo, length, index, covers)
    _plans.put(key, plan, 256 + (0 if plan.index is None else plan.index.nbytes))
    return plan


def _position_key(positions) -> range | tuple[bytes]:
    if isinstance(positions, range):
        return positions
    return (np.asarray(positions, np.int64).tobytes(),)


def read(memory, fm: FeatureMap, plan: Plan, dtype=None) -> np.ndarray:
    """The elements of `fm` where `plan` (plan()'s) puts them, (H, W, C), as `dtype` (None:
    fm.dtype); a new array the caller may change."""
    dtype = fm.dtype if dtype is None else dtype
    if plan.length == 0:
        return np.zeros(plan.shape, dtype)
    little = fm.stored_type
    raw = np.frombuffer(memory.read(plan.lo, plan.length), np.uint8)
    if plan.index is None:
        return raw.view(little).reshape(plan.shape).astype(dtype)
    if fm.elem_size == 1:
        return raw[plan.index].view(fm.dtype).astype(dtype, copy=False)
    return np.ascontiguousarray(raw[plan.index]).view(little)[..., 0].astype(dtype)


def write(memory, fm: FeatureMap, plan: Plan, values: np.ndarray) -> None:
    """Stores values (H, W, C), already in fm.dtype's range, where `plan` (plan()'s) puts the
    elements of `fm`; bytes between the elements keep their contents."""
    if plan.length == 0:
        return
    data = np.ascontiguousarray(values.astype(fm.stored_type, copy=False)).view(np.uint8)
    if plan.index is None:  # the elements fill the span: no byte between them to keep
        memory.write(plan.lo, data.reshape(plan.length))
        return
    lo, length = plan.lo, plan.length
    if plan.covers:
        span = np.empty(length, np.uint8)
    else:
        try:
            span = np.frombuffer(bytes(memory.read(lo, length)), np.uint8).copy()
        except RegionFault:
            raise
        except MemoryFault:
            raise MemoryFault(lo, length, "write") from None
    span[plan.index] = data.reshape(plan.index.shape)
    memory.write(lo, span)
