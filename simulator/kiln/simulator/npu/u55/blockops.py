"""Ethos-U55/U65 convolution, depthwise convolution and pooling (NPU_OP_CONV/DEPTHWISE/POOL):
the IFM window and the sums are kiln.simulator.npu.blockops'; here the weights and scales each
core reads (with two cores, even OFM channels on core 0 and odd ones on core 1, each from its
own WEIGHT/SCALE or WEIGHT1/SCALE1 stream), the 32- or 40-bit accumulator, and the pooling modes
MAX, AVERAGE and REDUCE_SUM.
"""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.arithmetic import clamp
from kiln.simulator.npu.blockops import (
    convolution_sums,
    depthwise_sums,
    padded_ifm,
    pool_values,
    record_kernel,
    tap_matrices,
)
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.output import scale_values
from kiln.simulator.npu.registers import RegisterError
from kiln.simulator.npu.u55 import weights as wt
from kiln.simulator.npu.u55.output import store
from kiln.simulator.npu.weights import decode_stream, kept

POOL_MAX, POOL_AVERAGE, POOL_REDUCE_SUM = 0, 1, 2
POOL_NAMES = {POOL_MAX: "MAX", POOL_AVERAGE: "AVERAGE", POOL_REDUCE_SUM: "REDUCE_SUM"}
ACC_INT32, ACC_INT40 = 0, 1
_CORE_NAMES = {0: "", 1: " (core 1)"}


def _scales(ctx: Context, channels: int, core: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    regs = ctx.registers
    suffix = "" if core == 0 else "1"
    length = regs.address(f"SCALE{suffix}_LENGTH")
    raw = ctx.read_region(
        regs.param("SCALE_REGION"),
        regs.address(f"SCALE{suffix}_BASE"),
        max(length, channels * wt.SCALE_RECORD_BYTES),
        f"scale read{_CORE_NAMES[core]}",
    )
    return wt.decode_scales(raw, channels)


def _weights(ctx: Context, core: int, shape: tuple[int, int, int, int], depthwise: bool) -> np.ndarray:
    """The OHWI weights one core holds for this operation."""
    regs = ctx.registers
    suffix = "" if core == 0 else "1"
    raw = ctx.read_region(
        regs.param("WEIGHT_REGION"),
        regs.address(f"WEIGHT{suffix}_BASE"),
        regs.address(f"WEIGHT{suffix}_LENGTH"),
        f"weight read{_CORE_NAMES[core]}",
    )
    k = regs.kernel()
    decomposition = 4 if regs.param("KERNEL_STRIDE") & (1 << 5) else wt.SUBKERNEL_MAX
    ifm_bits = 8 * np.dtype(regs.ifm_dtype("IFM")[0]).itemsize
    block_depth = (regs.param("OFM_BLK_DEPTH_M1") + 1) // ctx.config.cores
    arguments = (
        shape[0],
        shape[1],
        shape[2],
        shape[3],
        block_depth,
        ctx.config.ifm_ublock_depth,
        ctx.config.ofm_ublock_depth,
        depthwise,
        k.part_kernel_first,
        ifm_bits,
        decomposition // k.dilation_y,
        decomposition // k.dilation_x,
    )
    return kept(("U55", arguments, raw), lambda: wt.unpack(decode_stream(raw), wt.traversal_order(*arguments), shape))


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
    bits = _accumulator_bits(ctx)
    bias, multiplier, shift = _per_channel(ctx, depth)
    acc = acc + bias
    acc = clamp(acc, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
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
    record_kernel(ctx.coverage, k, pad)
    ctx.coverage.hit("kernel", "part-kernel-first" if k.part_kernel_first else "depth-first")
    ifm = regs.feature_map("IFM")
    x, _ = padded_ifm(ctx, ifm, range(ifm.depth), k, pad, out_h, out_w)
    w = np.zeros((depth, k.height, k.width, ifm.depth), np.int64)
    for core, channels in enumerate(_core_channels(ctx, depth)):
        if len(channels):
            w[channels] = _weights(ctx, core, (len(channels), k.height, k.width, ifm.depth), False)
    _finish_mac(ctx, convolution_sums(x, tap_matrices(w), k, out_h, out_w), depth)


def depthwise(ctx: Context) -> None:
    regs = ctx.registers
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    record_kernel(ctx.coverage, k, pad)
    ifm = regs.feature_map("IFM")
    x, _ = padded_ifm(ctx, ifm, range(depth), k, pad, out_h, out_w)
    w = np.zeros((depth, k.height, k.width, 1), np.int64)
    for core, channels in enumerate(_core_channels(ctx, depth)):
        if len(channels):
            w[channels] = _weights(ctx, core, (len(channels), k.height, k.width, 1), True)
    _finish_mac(ctx, depthwise_sums(x, w, k, out_h, out_w), depth)


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
