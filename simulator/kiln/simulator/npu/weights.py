"""The weight streams of both families: ethosu.mlw_codec-compressed values, decoded once per
distinct stream in a child process. Each family's order of the values and its scale records
are its own (kiln.simulator.npu.u55.weights, kiln.simulator.npu.u85.weights)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from ethosu import mlw_codec

from kiln.errors import WeightStreamError
from kiln.isolation import in_child


def decode_stream(raw: bytes) -> np.ndarray:
    """The weight values of one compressed stream, int64 (read-only: shared by every caller).

    mlw_codec ends the whole process (exit(1), "bitbuf_getbit: underrun") on a stream that
    runs short, so each distinct stream is decoded once, in a child process (kiln.isolation's,
    forked from its small server): a damaged one is a WeightStreamError, not a lost simulator."""
    return _decoded(bytes(raw))


DECODE_MEMORY_BYTES = 1 << 30  # a stream's values, int64, and the codec's own buffers
DECODE_SECONDS = 60.0


@lru_cache(maxsize=4096)  # distinct streams remembered (a model has one per convolution block)
def _decoded(raw: bytes) -> np.ndarray:
    values = np.frombuffer(
        in_child(
            _decode,
            (raw,),
            DECODE_MEMORY_BYTES,
            DECODE_SECONDS,
            lambda how: WeightStreamError(f"weight stream of {len(raw)} bytes does not decode: the codec {how}"),
        ),
        np.int64,
    )
    values.flags.writeable = False
    return values


def _decode(raw: bytes) -> bytes:
    """The stream's values as int64 bytes; run in kiln.isolation's child process."""
    return np.asarray(mlw_codec.decode(bytearray(raw)), np.int64).reshape(-1).tobytes()
