"""A damaged weight stream is the NPU model's WeightStreamError, never the end of the process:
ethosu.mlw_codec calls exit(1) on a stream that runs short, so kiln.simulator.npu.u55.weights decodes
each distinct stream in a forked child. Values round-trip through Vela's own encoder."""

from __future__ import annotations

import numpy as np
import pytest
from ethosu import mlw_codec

from kiln.errors import WeightStreamError
from kiln.simulator.npu import weights
from kiln.simulator.npu.u85 import weights as u85_weights


def test_a_stream_decodes_to_the_values_vela_encoded():
    values = np.random.default_rng(1).integers(-255, 256, 777)
    assert np.array_equal(weights.decode_stream(bytes(mlw_codec.encode(list(values)))), values)


@pytest.mark.parametrize("keep", [0, 3, 0.5])
def test_a_stream_that_runs_short_is_an_error_and_the_process_lives_on(keep, capfd):
    encoded = bytes(mlw_codec.encode(list(np.random.default_rng(2).integers(-127, 128, 600))))
    cut = encoded[: int(len(encoded) * keep) if isinstance(keep, float) else keep]
    with pytest.raises(WeightStreamError, match="does not decode"):
        weights.decode_stream(cut)
    assert "underrun" not in capfd.readouterr().out  # the codec's own complaint is not printed


def _fwd_by_bits(raw: bytes) -> list[int]:
    """The Ethos-U85 fast weight format read one bit at a time, as kiln.simulator.npu.u85.weights'
    comment lays it out: bit i is bit i % 8 of byte i // 8; a 256-bit header (raw_mode bit 0,
    small_lut bit 1, zero_adjust bits 104..111 signed, 16 palette entries of 9 bits from bit 112,
    magnitude << 1 | sign), then one code per value (2-bit palette indices with small_lut, raw
    8-bit values plus zero_adjust in raw mode, else 4-bit palette indices)."""

    def field(start: int, width: int) -> int:
        return sum(((raw[(start + i) // 8] >> ((start + i) % 8)) & 1) << i for i in range(width))

    raw_mode, small_lut = field(0, 1), field(1, 1)
    zero_adjust = field(104, 8) - (256 if field(111, 1) else 0)
    palette = [(-(f >> 1) if f & 1 else f >> 1) for f in (field(112 + 9 * i, 9) for i in range(16))]
    width = 2 if small_lut else (8 if raw_mode else 4)
    codes = [field(256 + k * width, width) for k in range((len(raw) * 8 - 256) // width)]
    if raw_mode and not small_lut:
        return [(c - 256 if c >= 128 else c) - zero_adjust for c in codes]
    return [palette[c] for c in codes]


@pytest.mark.parametrize("mode", [0, 1, 2, 3])  # raw_mode and small_lut, bits 0 and 1 of the header
def test_fast_weight_format_streams_decode_as_read_bit_by_bit(mode):
    rng = np.random.default_rng(mode)
    for length in (32, 33, 47, 96):
        raw = rng.integers(0, 256, length, dtype=np.uint8)
        raw[0] = (raw[0] & 0xFC) | mode
        got = u85_weights.decode_fwd(raw.tobytes())
        assert got.dtype == np.int64 and got.tolist() == _fwd_by_bits(raw.tobytes())


def test_a_fast_weight_format_stream_shorter_than_its_header_is_an_error():
    with pytest.raises(WeightStreamError, match="shorter than its 32-byte header"):
        u85_weights.decode_fwd(bytes(31))
