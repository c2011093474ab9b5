"""Reading and writing feature maps in NPU memory (NHWC or NHCWB16, up to four tiles).

A feature map's element (y, x, c) lives at region base + tile base + y * stride_y
+ x * stride_x' + (c // 16) * stride_c' + (c % 16) * element size, where for NHWC
stride_x' = STRIDE_X and stride_c' = 16 * element size (so c * element size), and for
NHCWB16 (bricks of 16 channels) stride_x' = 16 * element size and stride_c' = STRIDE_C.
Tiles: columns x >= WIDTH0 are in tile 1 (rows < HEIGHT1) or tile 3 (rows >= HEIGHT1,
counted from HEIGHT1); columns x < WIDTH0 are in tile 0 (rows < HEIGHT0) or tile 2
(rows >= HEIGHT0, counted from HEIGHT0); x and y count from the tile's origin.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import RegionFault
from kiln.simulator.npu.memory import MemoryFault
from kiln.simulator.npu.registers import FORMAT_NHCWB16, FeatureMap

BRICK = 16


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


def read(memory, fm: FeatureMap, region_base: int, ys, xs, channels) -> np.ndarray:
    """The elements at rows ys, columns xs, channels `channels` as fm.dtype, (H, W, C)."""
    address = addresses(fm, region_base, ys, xs, channels)
    if address.size == 0:
        return np.zeros(address.shape, fm.dtype)
    size = fm.elem_size
    lo, length = _span(address, size)
    raw = np.frombuffer(memory.read(lo, length), np.uint8)
    if size == 1:
        return raw[address - lo].view(fm.dtype)
    gathered = raw[_byte_index(address, lo, size)]
    return np.ascontiguousarray(gathered).view(np.dtype(fm.dtype).newbyteorder("<"))[..., 0].astype(fm.dtype)


def write(memory, fm: FeatureMap, region_base: int, ys, xs, channels, values: np.ndarray) -> None:
    """Stores values (H, W, C), already in fm.dtype's range, at the given positions;
    bytes between the elements keep their contents."""
    address = addresses(fm, region_base, ys, xs, channels)
    if address.size == 0:
        return
    size = fm.elem_size
    lo, length = _span(address, size)
    try:
        span = np.frombuffer(bytes(memory.read(lo, length)), np.uint8).copy()
    except RegionFault:
        raise
    except MemoryFault:
        raise MemoryFault(lo, length, "write") from None
    data = np.ascontiguousarray(values.astype(np.dtype(fm.dtype).newbyteorder("<"))).view(np.uint8)
    if size == 1:
        span[address - lo] = data.reshape(address.shape)
    else:
        span[_byte_index(address, lo, size)] = data.reshape(address.shape + (size,))
    memory.write(lo, span)
