"""What convolution, depthwise convolution and pooling (NPU_OP_CONV/DEPTHWISE/POOL) compute on
both families: the IFM window a kernel runs over, its taps, and the exact sums; each family's
operations (kiln.simulator.npu.u55.blockops, kiln.simulator.npu.u85.blockops) add the weights,
scales and accumulator its registers describe.

The IFM has no size registers: its extent follows from the OFM size, kernel, stride,
dilation and padding (rows past the last one read, as counted by PAD_BOTTOM/PAD_RIGHT,
are padding). Padded samples equal the IFM zero point, so they contribute zero after
the zero point is subtracted. IFM upscaling (NEAREST: each sample repeated 2x2;
TRANSPOSE: each sample followed by a zero-point sample in each axis) doubles the IFM
before the kernel runs over it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu.arithmetic import reciprocal
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.featuremap import Plan
from kiln.simulator.npu.output import scale_values
from kiln.simulator.npu.registers import (
    FORMAT_NHCWB16,
    UPSCALE_NEAREST,
    UPSCALE_NONE,
    UPSCALE_TRANSPOSE,
    FeatureMap,
    Kernel,
    Padding,
    RegisterError,
)

_UPSCALE_NAMES = {UPSCALE_NONE: "none", UPSCALE_NEAREST: "NEAREST", UPSCALE_TRANSPOSE: "TRANSPOSE"}
# The most IFM positions (rows x columns, padding included) of one window the model runs: its
# mask takes a byte each. A 4096 x 4096 image is 16 Mi; the registers allow 65536 x 65536.
MAX_WINDOW_POSITIONS = 1 << 26


def _extent(out: int, kernel: int, stride: int, dilation: int, before: int, after: int) -> int:
    """IFM samples (after upscaling) the operation reads along one axis, padding excluded."""
    return (out - 1) * stride + (kernel - 1) * dilation + 1 - before - after


def record_kernel(coverage, k: Kernel, pad: Padding) -> None:
    """Records the kernel's features in `coverage` (anything with Coverage's hit())."""
    hit = coverage.hit
    if k.width == 1 and k.height == 1:
        hit("kernel", "1x1")
    elif k.width <= 8 and k.height <= 8:
        hit("kernel", "up to 8x8")
    else:
        hit("kernel", "larger than 8x8 (decomposed)")
    if k.stride_x > 1 or k.stride_y > 1:
        hit("kernel", "stride > 1")
    if k.dilation_x > 1 or k.dilation_y > 1:
        hit("kernel", "dilation 2")
    if pad.top or pad.left or pad.bottom or pad.right:
        hit("kernel", "padding")


@dataclass(frozen=True)
class Window:
    """The IFM an operation's kernel runs over, as its registers give it (padded_ifm's, prepared:
    kiln.simulator.npu.prepared): the samples read, their upscaling and padding."""

    fm: FeatureMap
    plan: Plan  # where the samples read lie (before upscaling)
    upscale: int
    rows: int  # samples after upscaling, padding excluded
    cols: int
    pad: Padding
    mask: np.ndarray  # (rows, cols) with padding: real samples True; read-only


def prepare_window(
    coverage, ctx: Context, fm: FeatureMap, channels: range, k: Kernel, pad: Padding, out_h: int, out_w: int
) -> Window:
    """padded_ifm's window, its features recorded in `coverage` (anything with Coverage's hit())."""
    upscale = ctx.registers.upscale()
    coverage.hit("upscale", _UPSCALE_NAMES[upscale])
    rows = _extent(out_h, k.height, k.stride_y, k.dilation_y, pad.top, pad.bottom)
    cols = _extent(out_w, k.width, k.stride_x, k.dilation_x, pad.left, pad.right)
    if rows <= 0 or cols <= 0:
        raise RegisterError(f"padding {pad} leaves no IFM samples for a {out_h}x{out_w} OFM")
    factor = 1 if upscale == UPSCALE_NONE else 2
    src_rows, src_cols = -(-rows // factor), -(-cols // factor)
    coverage.hit("format", "IFM NHCWB16" if fm.layout == FORMAT_NHCWB16 else "IFM NHWC")
    coverage.hit("ifm_precision", fm.type_name)
    total_rows = (out_h - 1) * k.stride_y + (k.height - 1) * k.dilation_y + 1
    total_cols = (out_w - 1) * k.stride_x + (k.width - 1) * k.dilation_x + 1
    if total_rows * total_cols > MAX_WINDOW_POSITIONS:
        raise NotModelled(
            f"an IFM window of {total_rows} x {total_cols} positions is more than the model runs "
            f"({MAX_WINDOW_POSITIONS:,} at most)"
        )
    mask = np.zeros((total_rows, total_cols), bool)
    if upscale == UPSCALE_TRANSPOSE:
        valid = np.zeros((2 * src_rows, 2 * src_cols), bool)
        valid[::2, ::2] = True
        mask[pad.top : pad.top + rows, pad.left : pad.left + cols] = valid[:rows, :cols]
    else:
        mask[pad.top : pad.top + rows, pad.left : pad.left + cols] = True
    mask.flags.writeable = False
    plan = ctx.fm_plan(fm, range(src_rows), range(src_cols), channels)
    return Window(fm, plan, upscale, rows, cols, pad, mask)


def read_window(ctx: Context, window: Window) -> tuple[np.ndarray, np.ndarray]:
    """padded_ifm's values of `window` (prepare_window's) read now: (IFM minus zero point, int64,
    with padding and upscaling applied; the window's mask). Without padding the values are
    the samples read (possibly a view of them), else a new array."""
    fm = window.fm
    data = ctx.read_planned(fm, window.plan, "IFM read", np.int64)
    if fm.zero_point:
        data -= fm.zero_point
    if window.upscale == UPSCALE_NEAREST:
        data = data.repeat(2, axis=0).repeat(2, axis=1)
    elif window.upscale == UPSCALE_TRANSPOSE:
        spread = np.zeros((2 * data.shape[0], 2 * data.shape[1], data.shape[2]), np.int64)
        spread[::2, ::2] = data
        data = spread
    data = data[: window.rows, : window.cols]
    mask, pad = window.mask, window.pad
    if mask.shape == data.shape[:2]:  # no padding
        return data, mask
    padded = np.zeros((*mask.shape, data.shape[2]), np.int64)
    padded[pad.top : pad.top + window.rows, pad.left : pad.left + window.cols] = data
    return padded, mask


def padded_ifm(
    ctx: Context, fm: FeatureMap, channels: range, k: Kernel, pad: Padding, out_h: int, out_w: int
) -> tuple[np.ndarray, np.ndarray]:
    """(IFM minus zero point, int64, with padding and upscaling applied: shape
    (rows, cols, C) covering every kernel tap of every OFM position; validity mask
    (rows, cols) telling real samples from padding, read-only)."""
    return read_window(ctx, prepare_window(ctx.coverage, ctx, fm, channels, k, pad, out_h, out_w))


def taps(array: np.ndarray, k: Kernel, out_h: int, out_w: int):
    """Yields (ky, kx, view of `array` at that tap for every OFM position)."""
    for ky in range(k.height):
        y0 = ky * k.dilation_y
        for kx in range(k.width):
            x0 = kx * k.dilation_x
            yield (
                ky,
                kx,
                array[
                    y0 : y0 + (out_h - 1) * k.stride_y + 1 : k.stride_y,
                    x0 : x0 + (out_w - 1) * k.stride_x + 1 : k.stride_x,
                ],
            )


MANY_TAPS = 16  # a kernel with more taps is reduced over a view of all its windows at once


def windows(array: np.ndarray, k: Kernel, out_h: int, out_w: int) -> np.ndarray:
    """A read-only view (out_h, out_w, *array.shape[2:], k.height, k.width) of `array`
    (padded_ifm's, or its validity mask) whose [..., ky, kx] is taps' view at (ky, kx)."""
    s = array.strides
    shape = (out_h, out_w, *array.shape[2:], k.height, k.width)
    strides = (s[0] * k.stride_y, s[1] * k.stride_x, *s[2:], s[0] * k.dilation_y, s[1] * k.dilation_x)
    return np.lib.stride_tricks.as_strided(array, shape, strides, writeable=False)


def tap_sum(array: np.ndarray, k: Kernel, out_h: int, out_w: int) -> np.ndarray:
    """The sum of `array`'s views at every tap, int64 (out_h, out_w, *array.shape[2:])."""
    if k.height * k.width > MANY_TAPS:
        return windows(array, k, out_h, out_w).sum(axis=(-2, -1), dtype=np.int64)
    if k.height * k.width == 1:
        return next(taps(array, k, out_h, out_w))[2].astype(np.int64)
    result = np.zeros((out_h, out_w, *array.shape[2:]), np.int64)
    for _, _, view in taps(array, k, out_h, out_w):
        result += view
    return result


def tap_max(array: np.ndarray, k: Kernel, out_h: int, out_w: int, initial: int) -> np.ndarray:
    """The largest of `initial` and `array`'s views at every tap, int64 (out_h, out_w, *array.shape[2:])."""
    if k.height * k.width > MANY_TAPS:
        return windows(array, k, out_h, out_w).max(axis=(-2, -1), initial=initial).astype(np.int64)
    result = np.full((out_h, out_w, *array.shape[2:]), initial, np.int64)
    for _, _, view in taps(array, k, out_h, out_w):
        np.maximum(result, view, out=result)
    return result


def tap_matrices(w: np.ndarray) -> np.ndarray:
    """OHWI weights as convolution_sums takes them: float64 (kh, kw, I, O), per tap the
    matrix an IFM sample's channels are multiplied by."""
    return np.ascontiguousarray(w.transpose(1, 2, 3, 0), dtype=np.float64)


def convolution_sums(x: np.ndarray, matrices: np.ndarray, k: Kernel, out_h: int, out_w: int) -> np.ndarray:
    """Exact int64 sums (out_h, out_w, O) of padded IFM `x` (padded_ifm's) times the weights'
    tap_matrices; float64 products are exact for 8/16-bit operands and the sums of a real
    kernel."""
    xf = x.astype(np.float64)
    acc = np.zeros((out_h, out_w, matrices.shape[3]), np.float64)
    for ky, kx, view in taps(xf, k, out_h, out_w):
        acc += view @ matrices[ky, kx]
    return np.rint(acc).astype(np.int64)


def depthwise_sums(x: np.ndarray, w: np.ndarray, k: Kernel, out_h: int, out_w: int) -> np.ndarray:
    """int64 sums (out_h, out_w, C) of padded IFM `x` times per-channel weights `w` (C, kh, kw, 1)."""
    acc = np.zeros((out_h, out_w, w.shape[0]), np.int64)
    for ky, kx, view in taps(x, k, out_h, out_w):
        acc += view * w[:, ky, kx, 0]
    return acc


@dataclass(frozen=True)
class Pool:
    """A pooling operation as its registers give it (pool_values', prepared:
    kiln.simulator.npu.prepared)."""

    name: str
    k: Kernel
    pad: Padding
    out_h: int
    out_w: int
    window: Window
    bound: int | None  # |pooled value| at most, where the IFM's type tells (SUM, REDUCE_SUM)


def prepare_pool(coverage, ctx: Context, name: str) -> Pool:
    """pool_values' pooling `name`, its features recorded in `coverage`."""
    regs = ctx.registers
    coverage.hit("pooling", name)
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    record_kernel(coverage, k, pad)
    ifm = regs.feature_map("IFM")
    if name == "REDUCE_SUM" and depth != 1:
        raise RegisterError(f"REDUCE_SUM sums over the IFM's channels into one OFM channel; OFM depth is {depth}")
    channels = range(ifm.depth if name == "REDUCE_SUM" else depth)
    window = prepare_window(coverage, ctx, ifm, channels, k, pad, out_h, out_w)
    summed = k.height * k.width * (len(channels) if name == "REDUCE_SUM" else 1)
    bound = sample_bound(ifm) * summed if name in ("SUM", "REDUCE_SUM") else None
    return Pool(name, k, pad, out_h, out_w, window, bound)


def sample_bound(fm: FeatureMap) -> int:
    """The largest |sample - zero point| of `fm`'s type (padding, 0, included)."""
    info = np.iinfo(fm.dtype)
    return max(abs(int(info.min) - fm.zero_point), abs(int(info.max) - fm.zero_point))


def pool_values(ctx: Context, name: str, average_divides: bool = False) -> np.ndarray:
    """The pooled IFM, int64 (out_h, out_w, C), zero point subtracted, before the OFM scale.
    name: MAX or MIN (over the real samples of the window), SUM (of the window), AVERAGE
    (the sum; with padding, or always if `average_divides` (Ethos-U85), divided by the count
    of real samples), REDUCE_SUM (over the window and all IFM channels, into one OFM channel)."""
    return pooled(ctx, prepare_pool(ctx.coverage, ctx, name), average_divides)


def pooled(ctx: Context, pool: Pool, average_divides: bool = False) -> np.ndarray:
    """pool_values of `pool` (prepare_pool's) on the IFM as it is now."""
    name, k, pad, out_h, out_w = pool.name, pool.k, pool.pad, pool.out_h, pool.out_w
    x, valid = read_window(ctx, pool.window)
    if name == "REDUCE_SUM":
        x = x.sum(axis=2, keepdims=True)
    if name in ("MAX", "MIN"):
        sign = 1 if name == "MAX" else -1
        low = np.iinfo(np.int64).min // 4
        x = np.where(valid[:, :, None], sign * x, low)
        return sign * tap_max(x, k, out_h, out_w, low)
    result = tap_sum(x, k, out_h, out_w)
    if name == "AVERAGE" and (average_divides or any((pad.top, pad.left, pad.bottom, pad.right))):
        # the NPU divides each sum by its count of real (unpadded) samples
        count = tap_sum(valid.astype(np.int64), k, out_h, out_w)
        multiplier, shift = reciprocal(np.maximum(count, 1))
        result = scale_values(ctx, result, multiplier[:, :, None], shift[:, :, None])
    return result
