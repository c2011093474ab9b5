"""A damaged weight stream is the NPU model's WeightStreamError, never the end of the process:
ethosu.mlw_codec calls exit(1) on a stream that runs short, so kiln.simulator.npu.u55.weights decodes
each distinct stream in a forked child. Values round-trip through Vela's own encoder."""

from __future__ import annotations

import numpy as np
import pytest
from ethosu import mlw_codec

from kiln.errors import WeightStreamError
from kiln.simulator.npu import weights


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
