"""The range search of PT2E's HistogramObserver (torchao's _non_linear_param_search), with the
same answer in a fraction of the time.

The search narrows [start, end], a run of histogram bins, from the outside in: each step moves
the lower quantile bound alpha up or the upper bound beta down by 1e-5 and, when that moves a
bin bound, asks for the quantization error of the new run; it stops when the error grows.
torchao runs up to 1e5 steps, each reading single elements of a tensor; most steps move no bin.
Here the cumulative histogram is a list of floats, and a run of steps that moves no bin is
stepped through with one multiply and two compares a step.

Each comparison is torch's: a float32 element against a Python float, which torch rounds to
float32 (to nearest, ties to even) first. float32_below() turns "element > f32(x)" into compares
of doubles. alpha and beta are accumulated step by step as torchao accumulates them, so each
threshold is the same double.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

STEP = 1e-5  # torchao's granularity of alpha and beta


def f32(x: float) -> float:
    """x rounded to float32 (to nearest, ties to even), as torch rounds a Python scalar."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def float32_below(c: float) -> Callable[[float], bool]:
    """For c a float32 value: the test x -> f32(x) < c, for x >= 0, with doubles only."""
    if c <= 0:  # no x >= 0 rounds below 0
        return lambda x: False
    (bits,) = struct.unpack("<I", struct.pack("<f", c))
    (below,) = struct.unpack("<f", struct.pack("<I", bits - 1))  # the float32 just below c
    mid = (below + c) / 2  # exact in a double
    tie_down = f32(mid) < c  # a tie rounds to the even one of the two
    return lambda x: x < mid or (x == mid and tie_down)


def search(cumulative: list[float], total: float, error: Callable[[int, int], object]) -> tuple[int, int]:
    """The first and last bin of the run torchao's search settles on, for the cumulative
    histogram `cumulative` (float32 values), its sum `total` (the float32 sum), and
    error(start, end), the quantization error of a run (a value ordered by `>`)."""
    alpha, beta = 0.0, 1.0
    start, end = 0, len(cumulative) - 1
    norm_min = math.inf
    while alpha < beta:
        next_alpha, next_beta = alpha + STEP, beta - STEP
        low, high = f32(next_alpha * total), f32(next_beta * total)
        left, right = start, end
        while left < end and cumulative[left] < low:
            left += 1
        while right > start and cumulative[right] > high:
            right -= 1
        if left - start > end - right:
            new_start, new_end, alpha = left, end, next_alpha
        else:
            new_start, new_end, beta = start, right, next_beta
        if (new_start, new_end) == (start, end):
            # left == start and right == end: alpha stays, so the next steps find left == start
            # again and step beta down, moving nothing, until the end bin's count exceeds the
            # upper threshold (torchao's next scan moves `right`) or alpha < beta fails
            beta = _steps_moving_nothing(alpha, beta, total, cumulative[end] if end > start else None)
            continue
        norm = error(new_start, new_end)
        if norm > norm_min:
            break
        norm_min = norm
        start, end = new_start, new_end
    return start, end


def _steps_moving_nothing(alpha: float, beta: float, total: float, end_count: float | None) -> float:
    """beta after the steps that move no bin: each step (while alpha < beta) lowers beta by STEP
    unless the next upper threshold, f32((beta - STEP) * total), is below `end_count` (None:
    the run is one bin, which no threshold moves)."""
    below = float32_below(end_count) if end_count is not None else None
    while alpha < beta:
        next_beta = beta - STEP
        if below is not None and below(next_beta * total):
            break
        beta = next_beta
    return beta
