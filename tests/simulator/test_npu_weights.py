"""Weight-stream traversal order against ethosu.mlw_codec.reorder_encode (Vela's encoder),
and the bias/scale record layout against hand-packed bytes."""

from __future__ import annotations

import numpy as np
import pytest
from ethosu import mlw_codec

from kiln.simulator.npu.u55.weights import WeightStreamError, decode_scales, traversal_order

DIGIT = 127  # values 1..127 encode one base-127 digit of a position; 0 marks padding


def _encoder_order(shape, block_depth, ifm_ublock, ofm_ublock, depthwise, part_kernel, bits, decomp_h, decomp_w):
    """The position of every stream value, recovered by encoding position digits with
    Vela's encoder and decoding them back."""
    index = np.arange(int(np.prod(shape)))
    digits = []
    for d in range(3):
        values = ((index // DIGIT**d) % DIGIT + 1).reshape(shape).astype(np.int16)
        raw, _ = mlw_codec.reorder_encode(
            ifm_ublock, ofm_ublock, values, block_depth, depthwise, part_kernel, bits, decomp_h, decomp_w
        )
        digits.append(np.asarray(mlw_codec.decode(bytearray(raw)), np.int64))
    position = sum((digits[d] - 1) * DIGIT**d for d in range(3))
    return np.where(digits[0] == 0, -1, position)


@pytest.mark.parametrize("seed", range(40))
def test_traversal_matches_encoder(seed):
    rng = np.random.default_rng(seed)
    depthwise = bool(rng.integers(2))
    part_kernel = (not depthwise) and bool(rng.integers(2))
    bits = 8 if depthwise or rng.integers(3) else 16
    ofm_ublock = int(rng.choice([4, 8]))
    shape = (
        int(rng.integers(1, 40)),
        int(rng.integers(1, 12)),
        int(rng.integers(1, 12)),
        1 if depthwise else int(rng.integers(1, 70)),
    )
    block_depth = int(rng.choice([4, 8, 16, 32, 64]))
    block_depth = max(block_depth, ofm_ublock)
    decomp_h, decomp_w = 8 // int(rng.integers(1, 3)), 8 // int(rng.integers(1, 3))
    got = traversal_order(*shape, block_depth, 8, ofm_ublock, depthwise, part_kernel, bits, decomp_h, decomp_w)
    want = _encoder_order(shape, block_depth, 8, ofm_ublock, depthwise, part_kernel, bits, decomp_h, decomp_w)
    assert np.array_equal(got, want[: len(got)])
    assert np.all(want[len(got) :] == -1)  # the encoder may pad the stream's end


def test_scale_records_hand_packed():
    # bias -2 (40-bit two's complement), scale 0x89ABCDEF, shift 38; then bias 2^38, scale 1, shift 0
    raw = bytes(
        [
            0xFE,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xEF,
            0xCD,
            0xAB,
            0x89,
            38,
            0x00,
            0x00,
            0x00,
            0x00,
            0x40,
            0x01,
            0x00,
            0x00,
            0x00,
            0x00,
        ]
    )
    bias, scale, shift = decode_scales(raw, 2)
    assert bias.tolist() == [-2, 1 << 38]
    assert scale.tolist() == [0x89ABCDEF, 1]
    assert shift.tolist() == [38, 0]
    with pytest.raises(WeightStreamError, match="too short"):
        decode_scales(raw, 3)
