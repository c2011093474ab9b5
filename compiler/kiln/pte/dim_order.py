"""How a tensor's elements lie in memory: its dim_order, as kiln's runtime reads it.

A .pte tensor's dim_order lists its dims from the outermost in memory to the innermost: its
bytes are the row-major bytes of the tensor transposed by that permutation. kiln and
ExecuTorch's Ethos-U flow write the identity; ExecuTorch's Cortex-M flow writes activations
channels-last (0, 2, 3, 1: a tensor of sizes N, C, H, W stored N, H, W, C). The runtime
(firmware/runtime/src/support.cpp: dim_order_of) binds those two orders and refuses the rest;
one that is either once its dims of size 1 are left out is that one (the same bytes). Arrays on
the host are always in the order of their sizes (logical); these functions convert at the edges,
where bytes are read or written: constants, inputs, outputs, bundle tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CONTIGUOUS, CHANNELS_LAST = "contiguous", "channels-last"
CHANNELS_LAST_ORDER = (0, 2, 3, 1)


def _non_unit(order: Sequence[int], sizes: Sequence[int]) -> list[int]:
    return [d for d in order if sizes[d] != 1]


def layout(sizes: Sequence[int], dim_order: Sequence[int]) -> str | None:
    """CONTIGUOUS or CHANNELS_LAST as the runtime binds `dim_order` (the order as written where it
    is one of the two, else the one it equals once dims of size 1 are left out); None when the
    runtime refuses it (it is neither, or not a permutation of the dims)."""
    order, identity = tuple(dim_order), tuple(range(len(sizes)))
    if sorted(order) != list(identity):
        return None
    if order == identity:
        return CONTIGUOUS
    if order == CHANNELS_LAST_ORDER:
        return CHANNELS_LAST
    if _non_unit(order, sizes) == _non_unit(identity, sizes):
        return CONTIGUOUS
    if len(sizes) == 4 and _non_unit(order, sizes) == _non_unit(CHANNELS_LAST_ORDER, sizes):
        return CHANNELS_LAST
    return None


def from_memory(flat: np.ndarray, sizes: Sequence[int], dim_order: Sequence[int]) -> np.ndarray:
    """The array of `sizes` whose memory in `dim_order` is `flat` (its elements in memory order)."""
    stored = flat.reshape([sizes[d] for d in dim_order])
    return stored.transpose(np.argsort(dim_order))


def to_memory(array: np.ndarray, dim_order: Sequence[int]) -> np.ndarray:
    """`array` (in the order of its sizes) laid out in `dim_order`: a C-contiguous array whose
    bytes are the tensor's memory."""
    return np.ascontiguousarray(np.asarray(array).transpose(tuple(dim_order)))
