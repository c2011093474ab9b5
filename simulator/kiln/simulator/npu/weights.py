"""The weight streams of both families: ethosu.mlw_codec-compressed values, decoded once per
distinct stream in a child process. Each family's order of the values and its scale records
are its own (kiln.simulator.npu.u55.weights, kiln.simulator.npu.u85.weights).

An operation's weights, once worked out from its streams, are kept (kept(): WEIGHT_BYTES of
them) by everything they depend on, the streams' bytes included, so an operation run again
on the same streams (a firmware's next inference) reads its streams but decodes nothing."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from ethosu import mlw_codec

from kiln.errors import WeightStreamError
from kiln.isolation import in_child
from kiln.simulator.npu.memo import BoundedCache, keeps

# Bytes of weights kept: a 135M-parameter model's as float64 tap matrices take 1.1 GB.
WEIGHT_BYTES = 2 << 30
DECODED_BYTES = 256 << 20  # bytes of decoded streams kept (int64 values)


def decode_stream(raw: bytes) -> np.ndarray:
    """The weight values of one compressed stream, int64 (read-only: shared by every caller).

    mlw_codec ends the whole process (exit(1), "bitbuf_getbit: underrun") on a stream that
    runs short, so each distinct stream is decoded once, in a child process (kiln.isolation's,
    forked from its small server): a damaged one is a WeightStreamError, not a lost simulator."""
    return _decoded(bytes(raw))


DECODE_MEMORY_BYTES = 1 << 30  # a stream's values, int64, and the codec's own buffers
DECODE_SECONDS = 60.0


@keeps(DECODED_BYTES)  # by the stream's bytes
def _decoded(raw: bytes) -> np.ndarray:
    dtype, data = in_child(
        _decode,
        (raw,),
        DECODE_MEMORY_BYTES,
        DECODE_SECONDS,
        lambda how: WeightStreamError(f"weight stream of {len(raw)} bytes does not decode: the codec {how}"),
    )
    return np.frombuffer(data, dtype).astype(np.int64)


def _decode(raw: bytes) -> tuple[str, bytes]:
    """The stream's values as (the narrowest of int16, int32 and int64 holding them, their
    bytes in it): less to bring back from kiln.isolation's child process, where this runs."""
    values = np.asarray(mlw_codec.decode(bytearray(raw)), np.int64).reshape(-1)
    for dtype in (np.int16, np.int32):
        info = np.iinfo(dtype)
        if not len(values) or (info.min <= values.min() and values.max() <= info.max):
            return np.dtype(dtype).str, values.astype(dtype).tobytes()
    return np.dtype(np.int64).str, values.tobytes()


_kept = BoundedCache(WEIGHT_BYTES)


def kept(key: tuple, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """compute()'s weights (made read-only), kept by `key`, which must hold everything they
    depend on: the registers that order them and the bytes of every stream they are decoded
    from. Exceptions of compute() pass through and keep nothing."""
    weights = _kept.get(key)
    if weights is None:
        weights = compute()
        weights.flags.writeable = False
        _kept.put(key, weights, weights.nbytes + sum(len(part) for part in key if isinstance(part, bytes)))
    return weights
