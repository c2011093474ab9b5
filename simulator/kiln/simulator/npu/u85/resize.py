"""Ethos-U85 NPU_OP_RESIZE: TOSA RESIZE (NEAREST, BILINEAR) in hardware.

Registers (Vela 5.2.0's GenerateResizeOp): RESIZE_{X,Y}_SCALE_N_M1 = n - 1;
RESIZE_{X,Y}_STEP one_step_int [3:0] and, in the payload, one_step_mod [10:0], so the
step is d = one_step_int * n + one_step_mod; RESIZE_{X,Y}_OFFSET a signed 12-bit offset;
the IFM's height and width read are KERNEL_HEIGHT_M1 + 1 and KERNEL_WIDTH_M1 + 1, its
depth the OFM's. For OFM row oy (columns alike): y = oy * d + offset, iy = floor(y / n),
dy = y - iy * n; rows iy and iy + 1 are clamped into the IFM.
  NEAREST: the sample at iy + 1 where 2 * dy >= n, else at iy;
  BILINEAR: the four samples weighted (n - dy) or dy times (n - dx) or dx, exactly
  (TOSA's integer accumulator).
The accumulator holds that value (IFM zero point subtracted) times 2^16; Vela's OFM scale
is a multiplier of 1 and a shift of 16 plus the fused rescale's shift. REPLICATE is not
modelled (Vela does not emit it).
"""

from __future__ import annotations

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.output import scale_values
from kiln.simulator.npu.registers import RegisterError
from kiln.simulator.npu.u85.output import store

MODES = {0: "BILINEAR", 1: "REPLICATE", 2: "NEAREST"}
FRACTION_BITS = 16


def _axis(ctx: Context, axis: str, out: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(lower index, upper index, fraction dy, n) of every output position along `axis`."""
    regs = ctx.registers
    n = regs.param(f"RESIZE_{axis}_SCALE_N_M1") + 1
    step = regs.param(f"RESIZE_{axis}_STEP") & 0xF
    step_mod = regs.payload(f"RESIZE_{axis}_STEP") & 0x7FF
    offset = regs.param(f"RESIZE_{axis}_OFFSET") & 0xFFF
    offset -= 0x1000 if offset & 0x800 else 0
    if step_mod >= n:
        raise RegisterError(f"RESIZE_{axis}_STEP: one_step_mod {step_mod} is not below the scale's {n}")
    position = np.arange(out, dtype=np.int64) * (step * n + step_mod) + offset
    index = position // n
    fraction = position - index * n
    return np.clip(index, 0, size - 1), np.clip(index + 1, 0, size - 1), fraction, n


def resize(ctx: Context, mode: int) -> None:
    regs = ctx.registers
    name = MODES.get(mode)
    if name is None:
        raise RegisterError(f"NPU_OP_RESIZE: reserved mode {mode}")
    ctx.coverage.hit("resize", name)
    if name == "REPLICATE":
        raise NotModelled("NPU_OP_RESIZE: mode REPLICATE is not modelled")
    if regs.storage("IFM") != 0:
        raise NotModelled("NPU_OP_RESIZE: a chained IFM is not modelled")
    out_h, out_w, depth = regs.ofm_shape()
    in_h, in_w = regs.param("KERNEL_HEIGHT_M1") + 1, regs.param("KERNEL_WIDTH_M1") + 1
    ifm = regs.feature_map("IFM")
    x = ctx.read_fm(ifm, range(in_h), range(in_w), range(depth)).astype(np.int64) - ifm.zero_point
    y0, y1, dy, ny = _axis(ctx, "Y", out_h, in_h)
    x0, x1, dx, nx = _axis(ctx, "X", out_w, in_w)
    if name == "NEAREST":
        rows = np.where(2 * dy >= ny, y1, y0)
        cols = np.where(2 * dx >= nx, x1, x0)
        acc = x[rows][:, cols]
    else:
        wy1, wx1 = dy[:, None, None], dx[None, :, None]
        wy0, wx0 = ny - wy1, nx - wx1
        acc = x[y0][:, x0] * wy0 * wx0 + x[y0][:, x1] * wy0 * wx1 + x[y1][:, x0] * wy1 * wx0 + x[y1][:, x1] * wy1 * wx1
    if not regs.global_scale():
        raise NotModelled("NPU_OP_RESIZE: per-channel scaling is not modelled")
    multiplier, shift = regs.ofm_scale()
    store(ctx, scale_values(ctx, acc << FRACTION_BITS, multiplier, shift))
