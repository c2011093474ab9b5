"""Ethos-U85 weight and scale streams in the standard weight format (SWD).

Each core reads its own weight stream (WEIGHT_BASE/LENGTH for core 0, WEIGHT1..3 for
cores 1..3), ethosu.mlw_codec-compressed as on the Ethos-U55/U65
(kiln.simulator.npu.weights.decode_stream). The order of the values in a stream
(`traversal_order`, read from Vela 5.2.0's ethos_u85_weight_encoder.cpp):

  per OFM block (OFM_BLK_DEPTH channels)
    per IFM block (IFM block depth, below), in ascending order for even OFM blocks and
      descending for odd ones (depthwise: one block)
      per sub-kernel (the kernel cut into pieces of at most 8x8 taps, 8 / dilation per
        axis), columns of sub-kernels outer, rows inner
        per IFM microblock (depth-first: one per IFM block; part-kernel-first: 16 channels,
          8 for 16-bit IFMs that are not 2:4 sparse; depthwise: one channel)
          per OFM microblock (its depth from the microblock shape of ACC_FORMAT)
            per stride phase (y, then x; depth-first: one phase), per tap row, per tap
            in the row (even rows left to right, odd rows right to left)
              per group of 8 IFM channels of the IFM microblock (2:4 sparse: 16; depthwise: one)
                per group of 4 OFM channels of the microblock belonging to this core
                  (group g is core g mod cores)
                  per OFM channel of the group, per IFM channel of the group of 8
            zeros after the taps: taps are counted up to a multiple of 5 (part-kernel-first
            8-bit), 10 (part-kernel-first 16-bit or 2:4 sparse, depthwise) or 1 (depth-first); each
            missing tap is (IFM microblock depth * OFM microblock depth / cores) zeros
  Depthwise on configurations above 256 MACs or with 16-bit IFMs adds further zeros:
  after every 10th tap and after the padding, 2 (up to 512 MACs) or 6 taps' worth.
Positions past the last IFM or OFM channel hold zeros.

The IFM block depth is 64, or 16 for part-kernel-first, or 32 for 32-bit IFMs and for
128/256-MAC configurations whose OFM microblock is 16 deep (not 2:4 sparse), or 128 for
2:4 sparse 8-bit IFMs. A 2:4 sparse stream holds every value, zeros included.

Scale stream: one for all cores, a 10-byte record per OFM channel in channel order.
32-bit accumulator: bias [31:0], multiplier [62:32] (31 bits), shift [69:64].
48-bit accumulator: bias [47:0], multiplier [62:48] (15 bits), shift [69:64].
"""

from __future__ import annotations

import numpy as np

from kiln.errors import WeightStreamError
from kiln.simulator.npu.memo import BoundedCache, keeps

SCALE_RECORD_BYTES = 10
INTERLEAVE = 4  # OFM channels per core in turn

# OFM microblock depth by (MACs of all cores, microblock (height, width)) (ethos_u85.cpp).
OFM_UBLOCK_DEPTH = {
    128: {(1, 2): 8, (1, 1): 16},
    256: {(1, 2): 16, (1, 4): 8, (2, 2): 8},
    512: {(2, 2): 16, (1, 4): 16},
    1024: {(2, 2): 32, (1, 4): 32, (2, 4): 16},
    2048: {(2, 2): 64, (1, 4): 64, (4, 4): 16},
}


def ifm_block_depth(macs: int, ofm_ublock_depth: int, ifm_bits: int, part_kernel: bool, sparse: bool) -> int:
    if part_kernel:
        return 16
    if ifm_bits == 32 or (macs in (128, 256) and ofm_ublock_depth == 16 and not sparse):
        return 32
    if sparse and ifm_bits == 8:
        return 128
    return 64


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


ORDER_BYTES = 256 << 20  # bytes of orders kept


@keeps(ORDER_BYTES)
def traversal_order(
    ofm_depth: int,
    kernel_h: int,
    kernel_w: int,
    ifm_depth: int,
    ofm_block_depth: int,
    ofm_ublock: int,
    ifm_bits: int,
    depthwise: bool,
    part_kernel: bool,
    stride_x: int,
    stride_y: int,
    dilation_x: int,
    dilation_y: int,
    macs: int,
    cores: int,
    core: int,
    sparse: bool,
) -> np.ndarray:
    """Flat OHWI index (into an (ofm_depth, kernel_h, kernel_w, ifm_depth) tensor; ifm_depth
    1 for depthwise) of each value of core `core`'s stream, -1 for a zero; read-only."""
    ifm16 = ifm_bits == 16
    block = ifm_block_depth(macs, ofm_ublock, ifm_bits, part_kernel, sparse)
    if depthwise:
        tap_round, ifm_ublock = 10, 1
    elif part_kernel:
        tap_round, ifm_ublock = (10 if ifm16 or sparse else 5), (8 if ifm16 and not sparse else block)
    else:
        tap_round, ifm_ublock, stride_x, stride_y = 1, block, 1, 1
    inner = 1 if depthwise else (16 if sparse else 8)
    dw_extra = 0 if (not depthwise or (not ifm16 and macs <= 256)) else (2 if macs <= 512 else 6)
    decomp_x, decomp_y = 8 // dilation_x, 8 // dilation_y
    per_tap_pad = ifm_ublock * ofm_ublock // cores
    # one tap's values: (group of OFM channels of this core, OFM in group, IFM in group of 8)
    groups = np.arange(core * INTERLEAVE, ofm_ublock, INTERLEAVE * cores)
    ofm_in = (groups[:, None] + np.arange(INTERLEAVE)[None, :]).reshape(-1)
    pieces: list[np.ndarray] = []
    ifm_blocks = list(range(0, 1 if depthwise else ifm_depth, block))
    for n, ofm_block in enumerate(range(0, ofm_depth, ofm_block_depth)):
        ofm_len = min(ofm_block_depth, ofm_depth - ofm_block)
        for ifm_block in ifm_blocks if n % 2 == 0 else ifm_blocks[::-1]:
            ifm_len = 1 if depthwise else min(block, ifm_depth - ifm_block)
            for sub_x in range(0, kernel_w, decomp_x):
                sub_w = min(kernel_w - sub_x, decomp_x)
                for sub_y in range(0, kernel_h, decomp_y):
                    sub_h = min(kernel_h - sub_y, decomp_y)
                    taps = _taps(sub_x, sub_y, sub_w, sub_h, stride_x, stride_y)
                    for ifm_outer in range(0, ifm_len, ifm_ublock):
                        ifm = ifm_block + ifm_outer + np.arange(ifm_ublock if not depthwise else 1)
                        for ofm_outer in range(0, ofm_len, ofm_ublock):
                            ofm = ofm_block + ofm_outer + ofm_in
                            remaining = _round_up(len(taps), tap_round)
                            for y, x in taps:
                                remaining -= 1
                                pieces.append(
                                    _tap(ofm, ifm, y, x, ofm_depth, kernel_h, kernel_w, ifm_depth, depthwise, inner)
                                )
                                if dw_extra and remaining % tap_round == 0:
                                    pieces.append(np.full(dw_extra * ofm_ublock // cores, -1, np.int64))
                            if remaining > 0:
                                pieces.append(np.full((remaining + dw_extra) * per_tap_pad, -1, np.int64))
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)


def _taps(sub_x: int, sub_y: int, sub_w: int, sub_h: int, stride_x: int, stride_y: int) -> list[tuple[int, int]]:
    """(y, x) kernel positions of one sub-kernel in stream order."""
    taps = []
    for phase_y in range(stride_y):
        rows = (sub_h + stride_y - 1 - phase_y) // stride_y
        for phase_x in range(stride_x):
            cols = (sub_w + stride_x - 1 - phase_x) // stride_x
            for row in range(rows):
                for i in range(cols):
                    col = i if row % 2 == 0 else cols - 1 - i
                    taps.append((sub_y + phase_y + row * stride_y, sub_x + phase_x + col * stride_x))
    return taps


def _tap(
    ofm: np.ndarray,
    ifm: np.ndarray,
    y: int,
    x: int,
    ofm_depth: int,
    kernel_h: int,
    kernel_w: int,
    ifm_depth: int,
    depthwise: bool,
    inner: int,
) -> np.ndarray:
    """One tap's indices: IFM in groups of `inner` outer, then OFM channel, then IFM channel."""
    if depthwise:
        return np.where(ofm < ofm_depth, (ofm * kernel_h + y) * kernel_w + x, -1)
    ifm = ifm.reshape(-1, inner)  # (groups, inner)
    o = ofm[None, :, None]
    i = ifm[:, None, :]
    flat = ((o * kernel_h + y) * kernel_w + x) * ifm_depth + i
    return np.where((o < ofm_depth) & (i < ifm_depth), flat, -1).reshape(-1)


SCALE_BYTES = 64 << 20  # bytes of decoded scale streams kept (their records and int64 values)
_scales = BoundedCache(SCALE_BYTES)


def kept_scales(raw: bytes, channels: int, acc48: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """decode_scales(raw, channels, acc48), read-only, kept by its arguments (SCALE_BYTES of them):
    an operation run again on the same scale stream decodes nothing. Errors pass through and keep
    nothing."""
    key = (raw, channels, acc48)
    scales = _scales.get(key)
    if scales is None:
        scales = decode_scales(raw, channels, acc48)
        for values in scales:
            values.flags.writeable = False
        _scales.put(key, scales, len(raw) + sum(values.nbytes for values in scales))
    return scales


def decode_scales(raw: bytes, channels: int, acc48: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bias, multiplier, shift), int64, one per channel."""
    need = channels * SCALE_RECORD_BYTES
    if len(raw) < need:
        raise WeightStreamError(f"scale stream of {len(raw)} bytes is too short for {channels} channels ({need} bytes)")
    records = np.frombuffer(bytes(raw[:need]), np.uint8).reshape(channels, SCALE_RECORD_BYTES).astype(np.int64)
    bias_bytes = 6 if acc48 else 4
    bias = np.zeros(channels, np.int64)
    for i in range(bias_bytes):
        bias |= records[:, i] << (8 * i)
    bits = 8 * bias_bytes
    bias = np.where(bias >= 1 << (bits - 1), bias - (1 << bits), bias)
    multiplier = np.zeros(channels, np.int64)
    for i in range(bias_bytes, 8):
        multiplier |= records[:, i] << (8 * (i - bias_bytes))
    multiplier &= (1 << (63 - 8 * bias_bytes)) - 1
    shift = records[:, 8] & 0x3F
    return bias, multiplier, shift


# ---- the fast weight format (FWD) --------------------------------------------------------
#
# One stream for all cores (WEIGHT_BASE/LENGTH), read as a little-endian bit stream (bit i
# of the stream is bit i % 8 of byte i // 8). A 256-bit header: raw_mode [0], small_lut
# [1], zero_adjust [111:104] (signed), 16 palette entries of 9 bits from bit 112 (each
# folded: magnitude << 1 | sign). Then one code per value from bit 256: small_lut, 2-bit
# palette indices; raw_mode, 8 bits holding value + zero_adjust (as int8); otherwise 4-bit
# palette indices; zeros up to a multiple of 256 bits. (Vela 5.2.0's mlw_encode_fwd.cpp.)
# With several cores the values interleave the cores' orders (traversal_order) in turn,
# FWD_BLOCK values of each: OFM microblock depth * IFM microblock depth * taps rounded to
# (1 depth-first, 5 or 10 part-kernel-first) / cores.

FWD_HEADER_BITS = 256
FWD_PALETTE = 16


def decode_fwd(raw: bytes) -> np.ndarray:
    """Every value code of one FWD stream, int64 (padding included: the caller takes as many
    as its order needs)."""
    data = np.frombuffer(bytes(raw), np.uint8)
    if len(data) * 8 < FWD_HEADER_BITS:
        raise WeightStreamError(f"fast-format weight stream of {len(raw)} bytes is shorter than its 32-byte header")
    bits = np.unpackbits(data[: FWD_HEADER_BITS // 8], bitorder="little").astype(np.int64)

    def field(start: int, width: int) -> np.ndarray:
        return bits[start : start + width] @ (1 << np.arange(width, dtype=np.int64))

    raw_mode, small_lut = bool(bits[0]), bool(bits[1])
    zero_adjust = int(field(104, 8))
    zero_adjust -= 256 if zero_adjust >= 128 else 0
    folded = np.array([field(112 + 9 * i, 9) for i in range(FWD_PALETTE)], np.int64)
    palette = np.where(folded & 1, -(folded >> 1), folded >> 1)
    width = 2 if small_lut else (8 if raw_mode else 4)
    # Codes start on a byte and `width` divides 8: code k is bits (k * width) % 8 up of byte
    # k * width // 8, so each byte value stands for 8 // width values, looked up in a table.
    codes = (np.arange(256)[:, None] >> np.arange(0, 8, width)[None, :]) & ((1 << width) - 1)
    if raw_mode and not small_lut:
        table = np.where(codes >= 128, codes - 256, codes) - zero_adjust
    else:
        table = palette[codes]
    return np.take(table.astype(np.int64), data[FWD_HEADER_BITS // 8 :], axis=0).reshape(-1)


def fwd_block(ofm_ublock: int, ifm_bits: int, part_kernel: bool, sparse: bool, macs: int, cores: int) -> int:
    block = ifm_block_depth(macs, ofm_ublock, ifm_bits, part_kernel, sparse)
    ifm16 = ifm_bits == 16
    ifm_ublock = 8 if (part_kernel and ifm16 and not sparse) else block
    taps = (5 if not ifm16 and not sparse else 10) if part_kernel else 1
    return ofm_ublock * ifm_ublock * taps // cores


def deinterleave(values: np.ndarray, lengths: list[int], block: int) -> list[np.ndarray]:
    """Splits one FWD stream's values into the cores' streams of `lengths` values: `block`
    values of each core in turn (fewer at a core's end) until a round ends on an empty one."""
    out = [[] for _ in lengths]
    taken = [0] * len(lengths)
    pos = 0
    while True:
        last = 0
        for core, length in enumerate(lengths):
            last = min(block, length - taken[core])
            out[core].append(values[pos : pos + last])
            taken[core] += last
            pos += last
        if last == 0 or pos >= len(values):
            break
    if taken != lengths:
        raise WeightStreamError(f"fast-format weight stream holds {len(values)} values, the cores need {sum(lengths)}")
    return [np.concatenate(parts) if parts else np.zeros(0, np.int64) for parts in out]
