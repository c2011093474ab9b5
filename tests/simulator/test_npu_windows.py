"""kiln.simulator.npu.blockops' reductions over a kernel's taps at once (windows, tap_sum, tap_max,
for kernels of more than MANY_TAPS taps) against the same reductions worked out tap by tap from
the kernel's definition: tap (ky, kx) of OFM position (y, x) reads padded IFM row y * stride_y +
ky * dilation_y, column x * stride_x + kx * dilation_x."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.simulator.npu import blockops
from kiln.simulator.npu.registers import Kernel

KERNELS = [
    Kernel(width=20, height=1, stride_x=1, stride_y=1, dilation_x=1, dilation_y=1, part_kernel_first=False),
    Kernel(width=1, height=17, stride_x=1, stride_y=2, dilation_x=1, dilation_y=1, part_kernel_first=False),
    Kernel(width=5, height=4, stride_x=2, stride_y=1, dilation_x=2, dilation_y=2, part_kernel_first=False),
    Kernel(width=3, height=3, stride_x=1, stride_y=1, dilation_x=1, dilation_y=1, part_kernel_first=False),
]


def by_taps(array: np.ndarray, k: Kernel, out_h: int, out_w: int, reduce) -> np.ndarray:
    out = np.empty((out_h, out_w, *array.shape[2:]), np.int64)
    for y in range(out_h):
        for x in range(out_w):
            rows = [y * k.stride_y + ky * k.dilation_y for ky in range(k.height)]
            cols = [x * k.stride_x + kx * k.dilation_x for kx in range(k.width)]
            out[y, x] = reduce(array[np.ix_(rows, cols)].reshape(k.height * k.width, *array.shape[2:]))
    return out


@pytest.mark.parametrize("k", KERNELS, ids=lambda k: f"{k.height}x{k.width}")
def test_sums_and_maxima_over_every_tap(k):
    rng = np.random.default_rng(k.width * 31 + k.height)
    out_h, out_w = 3, 4
    rows = (out_h - 1) * k.stride_y + (k.height - 1) * k.dilation_y + 1
    cols = (out_w - 1) * k.stride_x + (k.width - 1) * k.dilation_x + 1
    x = rng.integers(-(1 << 40), 1 << 40, size=(rows, cols, 6), dtype=np.int64)
    assert np.array_equal(blockops.tap_sum(x, k, out_h, out_w), by_taps(x, k, out_h, out_w, lambda t: t.sum(0)))
    low = -(1 << 50)
    want = by_taps(x, k, out_h, out_w, lambda t: np.maximum(t.max(0), low))
    assert np.array_equal(blockops.tap_max(x, k, out_h, out_w, low), want)
    mask = rng.integers(0, 2, size=(rows, cols)).astype(np.int64)  # 2-D, as a validity mask
    assert np.array_equal(blockops.tap_sum(mask, k, out_h, out_w), by_taps(mask, k, out_h, out_w, lambda t: t.sum(0)))
    view = blockops.windows(x, k, out_h, out_w)
    for ky, kx, tap in blockops.taps(x, k, out_h, out_w):
        assert np.array_equal(view[:, :, :, ky, kx], tap)
