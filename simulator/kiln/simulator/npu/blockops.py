"""Convolution, depthwise convolution and pooling (NPU_OP_CONV/DEPTHWISE/POOL).

The IFM has no size registers: its extent follows from the OFM size, kernel, stride,
dilation and padding (rows past the last one read, as counted by PAD_BOTTOM/PAD_RIGHT,
are padding). Padded samples equal the IFM zero point, so they contribute zero after
the zero point is subtracted. IFM upscaling (NEAREST: each sample repeated 2x2;
TRANSPOSE: each sample followed by a zero-point sample in each axis) doubles the IFM
before the kernel runs over it.
"""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.u55 import weights as wt
from kiln.simulator.npu.arithmetic import reciprocal
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.output import scale_values
from kiln.simulator.npu.u55.output import store
from kiln.simulator.npu.registers import (
    FORMAT_NHCWB16, UPSCALE_NEAREST, UPSCALE_NONE, UPSCALE_TRANSPOSE, FeatureMap, Kernel, Padding, RegisterError)

POOL_MAX, POOL_AVERAGE, POOL_REDUCE_SUM = 0, 1, 2
POOL_NAMES = {POOL_MAX: "MAX", POOL_AVERAGE: "AVERAGE", POOL_REDUCE_SUM: "REDUCE_SUM"}
ACC_INT32, ACC_INT40 = 0, 1
_CORE_NAMES = {0: "", 1: " (core 1)"}
_UPSCALE_NAMES = {UPSCALE_NONE: "none", UPSCALE_NEAREST: "NEAREST", UPSCALE_TRANSPOSE: "TRANSPOSE"}


def _extent(out: int, kernel: int, stride: int, dilation: int, before: int, after: int) -> int:
    """IFM samples (after upscaling) the operation reads along one axis, padding excluded."""
    return (out - 1) * stride + (kernel - 1) * dilation + 1 - before - after


def record_kernel(ctx: Context, k: Kernel, pad: Padding) -> None:
    hit = ctx.coverage.hit
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


def padded_ifm(ctx: Context, fm: FeatureMap, channels: np.ndarray, k: Kernel, pad: Padding,
               out_h: int, out_w: int) -> tuple[np.ndarray, np.ndarray]:
    """(IFM minus zero point, int64, with padding and upscaling applied: shape
    (rows, cols, C) covering every kernel tap of every OFM position; validity mask
    (rows, cols) telling real samples from padding)."""
    upscale = ctx.registers.upscale()
    ctx.coverage.hit("upscale", _UPSCALE_NAMES[upscale])
    rows = _extent(out_h, k.height, k.stride_y, k.dilation_y, pad.top, pad.bottom)
    cols = _extent(out_w, k.width, k.stride_x, k.dilation_x, pad.left, pad.right)
    if rows <= 0 or cols <= 0:
        raise RegisterError(f"padding {pad} leaves no IFM samples for a {out_h}x{out_w} OFM")
    factor = 1 if upscale == UPSCALE_NONE else 2
    src_rows, src_cols = -(-rows // factor), -(-cols // factor)
    ctx.coverage.hit("format", "IFM NHCWB16" if fm.layout == FORMAT_NHCWB16 else "IFM NHWC")
    ctx.coverage.hit("ifm_precision", np.dtype(fm.dtype).name)
    data = ctx.read_fm(fm, np.arange(src_rows), np.arange(src_cols), channels).astype(np.int64) - fm.zero_point
    valid = np.ones((src_rows, src_cols), bool)
    if upscale == UPSCALE_NEAREST:
        data = data.repeat(2, axis=0).repeat(2, axis=1)
        valid = valid.repeat(2, axis=0).repeat(2, axis=1)
    elif upscale == UPSCALE_TRANSPOSE:
        spread = np.zeros((2 * src_rows, 2 * src_cols, data.shape[2]), np.int64)
        spread[::2, ::2] = data
        data = spread
        valid = np.zeros((2 * src_rows, 2 * src_cols), bool)
        valid[::2, ::2] = True
    data, valid = data[:rows, :cols], valid[:rows, :cols]
    total_rows = (out_h - 1) * k.stride_y + (k.height - 1) * k.dilation_y + 1
    total_cols = (out_w - 1) * k.stride_x + (k.width - 1) * k.dilation_x + 1
    padded = np.zeros((total_rows, total_cols, data.shape[2]), np.int64)
    padded[pad.top:pad.top + rows, pad.left:pad.left + cols] = data
    mask = np.zeros((total_rows, total_cols), bool)
    mask[pad.top:pad.top + rows, pad.left:pad.left + cols] = valid if upscale == UPSCALE_TRANSPOSE else True
    return padded, mask


def taps(array: np.ndarray, k: Kernel, out_h: int, out_w: int):
    """Yields (ky, kx, view of `array` at that tap for every OFM position)."""
    for ky in range(k.height):
        y0 = ky * k.dilation_y
        for kx in range(k.width):
            x0 = kx * k.dilation_x
            yield ky, kx, array[y0:y0 + (out_h - 1) * k.stride_y + 1:k.stride_y,
                                x0:x0 + (out_w - 1) * k.stride_x + 1:k.stride_x]


def _scales(ctx: Context, channels: int, core: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    regs = ctx.registers
    suffix = "" if core == 0 else "1"
    length = regs.address(f"SCALE{suffix}_LENGTH")
    raw = ctx.read_region(regs.param("SCALE_REGION"), regs.address(f"SCALE{suffix}_BASE"),
                          max(length, channels * wt.SCALE_RECORD_BYTES), f"scale read{_CORE_NAMES[core]}")
    return wt.decode_scales(raw, channels)


def _weights(ctx: Context, core: int, shape: tuple[int, int, int, int], depthwise: bool) -> np.ndarray:
    """The OHWI weights one core holds for this operation."""
    regs = ctx.registers
    suffix = "" if core == 0 else "1"
    raw = ctx.read_region(regs.param("WEIGHT_REGION"), regs.address(f"WEIGHT{suffix}_BASE"),
                          regs.address(f"WEIGHT{suffix}_LENGTH"), f"weight read{_CORE_NAMES[core]}")
    k = regs.kernel()
    decomposition = 4 if regs.param("KERNEL_STRIDE") & (1 << 5) else wt.SUBKERNEL_MAX
    ifm_bits = 8 * np.dtype(regs.ifm_dtype("IFM")[0]).itemsize
    block_depth = (regs.param("OFM_BLK_DEPTH_M1") + 1) // ctx.config.cores
    key = (raw, shape, depthwise, k.part_kernel_first, block_depth, ifm_bits, k.dilation_x, k.dilation_y,
           decomposition)
    cached = ctx.cache.get(key)
    if cached is not None:
        return cached
    order = wt.traversal_order(shape[0], shape[1], shape[2], shape[3], block_depth,
                               ctx.config.ifm_ublock_depth, ctx.config.ofm_ublock_depth, depthwise,
                               k.part_kernel_first, ifm_bits, decomposition // k.dilation_y,
                               decomposition // k.dilation_x)
    values = wt.unpack(wt.decode_stream(raw), order, shape)
    ctx.cache[key] = values
    return values


def _core_channels(ctx: Context, depth: int) -> list[np.ndarray]:
    """OFM channels each core computes: with two cores, even channels on core 0, odd on core 1."""
    cores = ctx.config.cores
    ctx.coverage.hit("cores", str(cores))
    return [np.arange(core, depth, cores) for core in range(cores)]


def _per_channel(ctx: Context, depth: int):
    """(bias, multiplier, shift) for every OFM channel, gathered from each core's stream."""
    bias = np.zeros(depth, np.int64)
    multiplier = np.zeros(depth, np.int64)
    shift = np.zeros(depth, np.int64)
    for core, channels in enumerate(_core_channels(ctx, depth)):
        if len(channels):
            b, m, s = _scales(ctx, len(channels), core)
            bias[channels], multiplier[channels], shift[channels] = b, m, s
    return bias, multiplier, shift


def _accumulator_bits(ctx: Context) -> int:
    acc = ctx.registers.param("ACC_FORMAT") & 3
    if acc == ACC_INT32:
        ctx.coverage.hit("accumulator", "32-bit")
        return 32
    if acc == ACC_INT40:
        ctx.coverage.hit("accumulator", "40-bit")
        return 40
    raise RegisterError(f"ACC_FORMAT: accumulator format {acc} is not an integer format")


def _finish_mac(ctx: Context, acc: np.ndarray, depth: int) -> None:
    """Bias, per-channel scaling and store of a convolution's accumulators."""
    from kiln.simulator.npu.arithmetic import saturate
    bits = _accumulator_bits(ctx)
    bias, multiplier, shift = _per_channel(ctx, depth)
    acc = acc + bias
    acc = np.clip(acc, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if ctx.registers.global_scale():
        ctx.coverage.hit("ofm_scaling", "global")
        multiplier, shift = ctx.registers.ofm_scale()
    else:
        ctx.coverage.hit("ofm_scaling", "per-channel")
    store(ctx, scale_values(ctx, acc, multiplier, shift))


def convolution(ctx: Context) -> None:
    regs = ctx.registers
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    record_kernel(ctx, k, pad)
    ctx.coverage.hit("kernel", "part-kernel-first" if k.part_kernel_first else "depth-first")
    ifm = regs.feature_map("IFM")
    x, _ = padded_ifm(ctx, ifm, np.arange(ifm.depth), k, pad, out_h, out_w)
    w = np.zeros((depth, k.height, k.width, ifm.depth), np.int64)
    for core, channels in enumerate(_core_channels(ctx, depth)):
        if len(channels):
            w[channels] = _weights(ctx, core, (len(channels), k.height, k.width, ifm.depth), False)
    _finish_mac(ctx, convolution_sums(x, w, k, out_h, out_w), depth)


def convolution_sums(x: np.ndarray, w: np.ndarray, k: Kernel, out_h: int, out_w: int) -> np.ndarray:
    """Exact int64 sums (out_h, out_w, O) of padded IFM `x` (padded_ifm's) times OHWI weights
    `w`; float64 products are exact for 8/16-bit operands and the sums of a real kernel."""
    xf = x.astype(np.float64)
    acc = np.zeros((out_h, out_w, w.shape[0]), np.float64)
    for ky, kx, view in taps(xf, k, out_h, out_w):
        acc += view @ w[:, ky, kx, :].T.astype(np.float64)
    return np.rint(acc).astype(np.int64)


def depthwise(ctx: Context) -> None:
    regs = ctx.registers
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    record_kernel(ctx, k, pad)
    ifm = regs.feature_map("IFM")
    x, _ = padded_ifm(ctx, ifm, np.arange(depth), k, pad, out_h, out_w)
    w = np.zeros((depth, k.height, k.width, 1), np.int64)
    for core, channels in enumerate(_core_channels(ctx, depth)):
        if len(channels):
            w[channels] = _weights(ctx, core, (len(channels), k.height, k.width, 1), True)
    _finish_mac(ctx, depthwise_sums(x, w, k, out_h, out_w), depth)


def depthwise_sums(x: np.ndarray, w: np.ndarray, k: Kernel, out_h: int, out_w: int) -> np.ndarray:
    """int64 sums (out_h, out_w, C) of padded IFM `x` times per-channel weights `w` (C, kh, kw, 1)."""
    acc = np.zeros((out_h, out_w, w.shape[0]), np.int64)
    for ky, kx, view in taps(x, k, out_h, out_w):
        acc += view * w[:, ky, kx, 0]
    return acc


def pooling(ctx: Context, mode: int) -> None:
    regs = ctx.registers
    if mode not in POOL_NAMES:
        raise RegisterError(f"NPU_OP_POOL: reserved pooling mode {mode}")
    result = pool_values(ctx, POOL_NAMES[mode])
    if regs.global_scale():
        ctx.coverage.hit("ofm_scaling", "global")
        multiplier, shift = regs.ofm_scale()
        result = scale_values(ctx, result, multiplier, shift)
    else:
        ctx.coverage.hit("ofm_scaling", "per-channel")
    store(ctx, result)


def pool_values(ctx: Context, name: str, average_divides: bool = False) -> np.ndarray:
    """The pooled IFM, int64 (out_h, out_w, C), zero point subtracted, before the OFM scale.
    name: MAX or MIN (over the real samples of the window), SUM (of the window), AVERAGE
    (the sum; with padding, or always if `average_divides` (Ethos-U85), divided by the count
    of real samples), REDUCE_SUM (over the window and all IFM channels, into one OFM channel)."""
    regs = ctx.registers
    ctx.coverage.hit("pooling", name)
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    record_kernel(ctx, k, pad)
    ifm = regs.feature_map("IFM")
    if name == "REDUCE_SUM" and depth != 1:
        raise RegisterError(f"REDUCE_SUM sums over the IFM's channels into one OFM channel; OFM depth is {depth}")
    channels = np.arange(ifm.depth if name == "REDUCE_SUM" else depth)
    x, valid = padded_ifm(ctx, ifm, channels, k, pad, out_h, out_w)
    if name == "REDUCE_SUM":
        x = x.sum(axis=2, keepdims=True)
    if name in ("MAX", "MIN"):
        sign = 1 if name == "MAX" else -1
        low = np.iinfo(np.int64).min // 4
        x = np.where(valid[:, :, None], sign * x, low)
        result = np.full((out_h, out_w, depth), low, np.int64)
        for _, _, view in taps(x, k, out_h, out_w):
            np.maximum(result, view, out=result)
        return sign * result
    result = np.zeros((out_h, out_w, depth), np.int64)
    for _, _, view in taps(x, k, out_h, out_w):
        result += view
    if name == "AVERAGE" and (average_divides or any((pad.top, pad.left, pad.bottom, pad.right))):
        # the NPU divides each sum by its count of real (unpadded) samples
        count = np.zeros((out_h, out_w), np.int64)
        for _, _, view in taps(valid.astype(np.int64), k, out_h, out_w):
            count += view
        multiplier, shift = reciprocal(np.maximum(count, 1))
        result = scale_values(ctx, result, multiplier[:, :, None], shift[:, :, None])
    return result
