"""What NPU_OP_ELEMENTWISE does alike on both families: naming a mode (recorded in the
coverage) and SHR's rounding. Each family's modes, operands and scaling are its own
(kiln.simulator.npu.u55.elementwise, kiln.simulator.npu.u85.elementwise)."""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.registers import ROUND_NATURAL, RegisterError


def shift_right(a: np.ndarray, b: np.ndarray, rounding: int) -> np.ndarray:
    """SHR: NATURAL rounds half up; TFL (regor's choice for TOSA's round=False) and
    TRUNCATE discard the shifted-out bits (floor)."""
    amount = np.clip(b, 0, 63)
    if rounding == ROUND_NATURAL:
        half = np.where(amount > 0, np.left_shift(np.int64(1), np.maximum(amount - 1, 0)), 0)
        return (a + half) >> amount
    return a >> amount


def mode_name(coverage, modes: dict[int, str], mode: int) -> str:
    """The name of elementwise `mode` in `modes` (recorded in `coverage`: anything with the
    hit() of kiln.simulator.npu.coverage.Coverage); a mode not in it is reserved."""
    name = modes.get(mode)
    if name is None:
        raise RegisterError(f"NPU_OP_ELEMENTWISE: reserved mode {mode}")
    coverage.hit("elementwise", name)
    return name
