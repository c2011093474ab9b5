"""The Ethos-U55/U65's weight and bias/scale streams of convolution-type operations (the
streams' decoding is kiln.simulator.npu.weights').

Bias/scale stream: one 10-byte record per output channel, little-endian: bits 39..0 a
signed bias, bits 71..40 an unsigned 32-bit multiplier, bits 77..72 the shift.

Weight stream: ethosu.mlw_codec-compressed values in the order the NPU consumes them
(`traversal_order`): per OFM block (OFM_BLK_DEPTH channels), per IFM block (depth-first:
32 channels for 8-bit IFMs, 16 for 16-bit; part-kernel-first: 16), per sub-kernel (the
kernel cut into pieces of at most 8x8 taps, 4x4 with dilation 2 in that axis), then
 - depth-first: per OFM microblock, per kernel tap, per IFM microblock, per OFM channel in
   the microblock, per IFM channel in the microblock;
 - part-kernel-first: per IFM microblock, per OFM microblock, per kernel tap (taps padded
   to a multiple of 4 for 8-bit, 2 for 16-bit IFMs), per OFM channel, per IFM channel;
 - depthwise: like depth-first with one IFM channel per OFM channel and taps padded to a
   multiple of 4.
Positions outside the tensor (past the last channel or padding taps) hold zeros.
The depth-first traversal covers whole IFM blocks (32 or 16 channels) even past the
last IFM channel.
The microblock depths are the configuration's (NpuConfig.ifm_ublock_depth/ofm_ublock_depth).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from kiln.errors import WeightStreamError

SCALE_RECORD_BYTES = 10
SUBKERNEL_MAX = 8


def decode_scales(raw: bytes, channels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bias int64, multiplier int64, shift int64), one per channel."""
    need = channels * SCALE_RECORD_BYTES
    if len(raw) < need:
        raise WeightStreamError(f"scale stream of {len(raw)} bytes is too short for {channels} channels ({need} bytes)")
    records = np.frombuffer(bytes(raw[:need]), np.uint8).reshape(channels, SCALE_RECORD_BYTES).astype(np.int64)
    bias = np.zeros(channels, np.int64)
    for i in range(5):
        bias |= records[:, i] << (8 * i)
    bias = np.where(bias >= 1 << 39, bias - (1 << 40), bias)
    multiplier = np.zeros(channels, np.int64)
    for i in range(4):
        multiplier |= records[:, 5 + i] << (8 * i)
    shift = records[:, 9] & 0x3F
    return bias, multiplier, shift


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@lru_cache(maxsize=512)
def traversal_order(
    ofm_depth: int,
    kernel_h: int,
    kernel_w: int,
    ifm_depth: int,
    ofm_block_depth: int,
    ifm_ublock: int,
    ofm_ublock: int,
    depthwise: bool,
    part_kernel: bool,
    ifm_bits: int,
    decomp_h: int,
    decomp_w: int,
) -> np.ndarray:
    """Flat OHWI index (into an (ofm_depth, kernel_h, kernel_w, ifm_depth) tensor, ifm_depth 1
    for depthwise) of each stream position, -1 for a zero pad; read-only, cached."""
    ifm_block_depth = 16 if (part_kernel or ifm_bits == 16) else 32
    pieces = []
    for ofm_block in range(0, ofm_depth, ofm_block_depth):
        ofm_block_len = min(ofm_block_depth, ofm_depth - ofm_block)
        for ifm_block in range(0, 1 if depthwise else ifm_depth, ifm_block_depth):
            ifm_block_len = ofm_block_len if depthwise else min(ifm_block_depth, ifm_depth - ifm_block)
            for sub_y in range(0, kernel_h, decomp_h):
                sub_h = min(kernel_h - sub_y, decomp_h)
                for sub_x in range(0, kernel_w, decomp_w):
                    sub_w = min(kernel_w - sub_x, decomp_w)
                    taps = sub_h * sub_w
                    if part_kernel:
                        taps = _round_up(taps, 2 if ifm_bits == 16 else 4)
                    elif depthwise:
                        taps = _round_up(taps, 4)
                    pieces.append(
                        _subkernel(
                            ofm_block,
                            ofm_block_len,
                            ifm_block,
                            ifm_block_len,
                            sub_y,
                            sub_x,
                            sub_h,
                            sub_w,
                            taps,
                            ofm_depth,
                            kernel_h,
                            kernel_w,
                            ifm_depth,
                            ifm_ublock,
                            ofm_ublock,
                            depthwise,
                            part_kernel,
                            ifm_block_depth,
                        )
                    )
    order = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    order.setflags(write=False)
    return order


def _subkernel(
    ofm_block,
    ofm_block_len,
    ifm_block,
    ifm_block_len,
    sub_y,
    sub_x,
    sub_h,
    sub_w,
    taps,
    ofm_depth,
    kernel_h,
    kernel_w,
    ifm_depth,
    ifm_ublock,
    ofm_ublock,
    depthwise,
    part_kernel,
    ifm_block_depth,
):
    ofm_ublocks = np.arange(0, ofm_block_len, ofm_ublock)
    ifm_ublocks = np.arange(0, ifm_block_len, ifm_ublock)
    if not (part_kernel or depthwise):
        # depth-first traversal always covers a whole IFM block, zeros past the last channel
        ifm_ublocks = np.arange(0, ifm_block_depth, ifm_ublock)
    tap = np.arange(taps)
    ofm_in = np.arange(ofm_ublock)
    ifm_in = np.arange(1 if depthwise else ifm_ublock)
    if part_kernel:
        # axes: ifm ublock, ofm ublock, tap, ofm in ublock, ifm in ublock
        grid = np.meshgrid(ifm_ublocks, ofm_ublocks, tap, ofm_in, ifm_in, indexing="ij")
        iu, ou, t, oi, ii = (g.reshape(-1) for g in grid)
    elif depthwise:
        # axes: ofm ublock, tap, ofm in ublock (one IFM channel per OFM channel)
        grid = np.meshgrid(ofm_ublocks, tap, ofm_in, indexing="ij")
        ou, t, oi = (g.reshape(-1) for g in grid)
        iu = np.zeros_like(ou)
        ii = np.zeros_like(ou)
    else:
        # axes: ofm ublock, tap, ifm ublock, ofm in ublock, ifm in ublock
        grid = np.meshgrid(ofm_ublocks, tap, ifm_ublocks, ofm_in, ifm_in, indexing="ij")
        ou, t, iu, oi, ii = (g.reshape(-1) for g in grid)
    ky = t // sub_w
    kx = t % sub_w
    o = ofm_block + ou + oi
    i = ifm_block + iu + ii
    y = sub_y + ky
    x = sub_x + kx
    if depthwise:
        valid = (o < ofm_depth) & (ou + oi < ofm_block_len) & (ky < sub_h)
        flat = (o * kernel_h + y) * kernel_w + x
    else:
        valid = (o < ofm_depth) & (i < ifm_depth) & (ou + oi < ofm_block_len) & (iu + ii < ifm_block_len) & (ky < sub_h)
        flat = ((o * kernel_h + y) * kernel_w + x) * ifm_depth + i
    return np.where(valid, flat, -1).astype(np.int64)


def unpack(values: np.ndarray, order: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Places the decoded stream values into an OHWI tensor of `shape` (zeros elsewhere)."""
    if len(values) < len(order):
        raise WeightStreamError(f"weight stream holds {len(values)} values, the operation needs {len(order)}")
    out = np.zeros(int(np.prod(shape)), np.int64)
    used = order >= 0
    out[order[used]] = values[: len(order)][used]
    return out.reshape(shape)
