"""Resizing: nearest and bilinear upsampling (and bilinear to any size)."""

from __future__ import annotations

import math

import numpy as np
import torch
import tosa_serializer as ts

from kiln.families import HARDWARE_RESIZE
from kiln.graph import Op, Value
from kiln.lower.lowerer import ACCUMULATOR, DT, Lowerer, attr, biases, lowering, slice_of
from kiln.partition.support import whole_bilinear_factors

aten = torch.ops.aten


RESIZE_NEAREST_FACTORS = (2, 4, 8)  # nearest upsampling Vela 5.2.0 runs as one RESIZE on Ethos-U55/U65 (both ways)


@lowering(aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default)
def _upsample_nearest(lw: Lowerer, op: Op):
    """Nearest upsampling by whole factors (a support rule): each value repeated fy x fx
    times. By 2, 4 or 8 both ways, one TOSA RESIZE, which Vela 5.2.0 runs on Ethos-U55/U65
    as one upscaling pool (other factors it refuses there), and by any factors where the
    family has resize hardware (kiln.families.HARDWARE_RESIZE); otherwise CONCATs of copies
    and RESHAPEs. The
    RESIZE's scale is 2f / 2 with offset 1 - f and border f - 1: the source
    row of output row y is then (2y + 1 - f) / 2f rounded half up = floor(y / f), PyTorch's
    nearest index (scale f / 1 with offset 0 is the same index, but Vela refuses it)."""
    x, out = op.inputs[0], op.output
    fy, fx = out.shape[2] // x.shape[2], out.shape[3] // x.shape[3]
    name = lw.nhwc(x)
    if lw.family.has(HARDWARE_RESIZE) or (fy == fx and fy in RESIZE_NEAREST_FACTORS):
        resized = lw.inter(Lowerer.shape_of(out, True), out.dtype)
        lw.emit(
            "RESIZE",
            [
                name,
                lw.shape_const([2 * fy, 2, 2 * fx, 2]),
                lw.shape_const([1 - fy, 1 - fx]),
                lw.shape_const([fy - 1, fx - 1]),
            ],
            [resized],
            attr("Resize", ts.ResizeMode.NEAREST),
        )
        lw.result(out, resized, True)
        return
    lw.result(out, _interleave(lw, [[name] * fx] * fy, x.shape, x.dtype), True)


def _interleave(lw: Lowerer, phases: list[list[str]], shape, dtype: str) -> str:
    """NHWC [N, H*fy, W*fx, C] whose pixel (y*fy + py, x*fx + px) is pixel (y, x) of
    phases[py][px] (each NHWC [N, H, W, C]): CONCATs and free RESHAPEs only."""
    n, c, h, w = shape
    fy, fx = len(phases), len(phases[0])
    rows = []
    for row in phases:
        parts = [lw.reshape(p, [n * h, w, 1, c], dtype) for p in row]
        if fx > 1:
            wide = lw.inter([n * h, w, fx, c], dtype)
            lw.emit("CONCAT", parts, [wide], attr("Concat", 2))
            parts = [wide]
        rows.append(lw.reshape(parts[0], [n * h, 1, w * fx * c], dtype))
    if fy > 1:
        tall = lw.inter([n * h, fy, w * fx * c], dtype)
        lw.emit("CONCAT", rows, [tall], attr("Concat", 1))
        rows = [tall]
    return lw.reshape(rows[0], [n, h * fy, w * fx, c], dtype)


def bilinear_taps(factor: int) -> np.ndarray:
    """[factor, 3] integer weights, in units of 1 / (2 * factor), of input samples
    (i - 1, i, i + 1) for output sample factor * i + p (align_corners=False: the source
    coordinate is i + (2p + 1 - factor) / (2 * factor), edges clamped)."""
    taps = np.zeros((factor, 3), np.int64)
    for p in range(factor):
        f = 2 * p + 1 - factor
        taps[p] = [-f, 2 * factor + f, 0] if f < 0 else [0, 2 * factor - f, f]
    return taps


@lowering(aten.upsample_bilinear2d.vec, aten.upsample_bilinear2d.default)
def _upsample_bilinear(lw: Lowerer, op: Op):
    """Bilinear upsampling by whole factors without align_corners (a support rule): the
    input padded by replicating its edges, one 3x3 depthwise convolution per output phase
    with the exact integer weights, one RESCALE each (one rounding), then interleaved. With
    align_corners: _bilinear_aligned. Where the family has resize hardware (faster there:
    kiln.families.HARDWARE_RESIZE), and for other sizes, one RESIZE (_bilinear_resize)."""
    x, out = op.inputs[0], op.output
    if op.arg("align_corners"):
        _bilinear_aligned(lw, x, out)
        return
    if lw.family.has(HARDWARE_RESIZE) or not whole_bilinear_factors(x.shape, out.shape):
        _bilinear_resize(lw, x, out)
        return
    n, c, h, w = x.shape
    fy, fx = out.shape[2] // h, out.shape[3] // w
    padded = _replicate_pad(lw, lw.nhwc(x), [n, h, w, c], x.dtype)
    scale = x.qparams.scale / (4 * fy * fx * out.qparams.scale)
    acc_type = ACCUMULATOR[x.dtype]
    attribute = attr("DepthwiseConv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type])
    phases = []
    for ty in bilinear_taps(fy):
        row = []
        for tx in bilinear_taps(fx):
            weights = np.broadcast_to(np.outer(ty, tx)[:, :, None, None], (3, 3, c, 1))
            acc = lw.inter([n, h, w, c], acc_type)
            lw.emit(
                "DEPTHWISE_CONV2D",
                [
                    padded,
                    lw.const(weights, "int8", "taps"),
                    biases(lw, None, c, acc_type),
                    lw.zp(x.qparams.zero_point, x.dtype),
                    lw.zp(0, "int8"),
                ],
                [acc],
                attribute,
            )
            row.append(lw.rescale(acc, [n, h, w, c], acc_type, out.dtype, scale, 0, out.qparams.zero_point))
        phases.append(row)
    lw.result(out, _interleave(lw, phases, x.shape, out.dtype), True)


def _bilinear_resize(lw: Lowerer, x: Value, out: Value):
    """Bilinear resizing to any size without align_corners as one TOSA RESIZE (Ethos-U85, a
    support rule). PyTorch's source row of output row y is (y + 0.5) * ih / oh - 0.5, clamped
    at 0: in units of 1 / (2 oh) that is y * 2 ih + (ih - oh), so scale 2 oh / 2 ih, offset
    ih - oh and border oh - ih, each axis then reduced to its smallest units (fewer weights, a
    power of two more often); TOSA clamps the taps at the edges as PyTorch does. The RESIZE
    weighs raw integers by weights totalling y_n * x_n, so the zero point is weighed too: where
    the output has x's scale it is x's zero point in the int32 sums of int8 x, taken off by the
    output's zero point; otherwise x minus its zero point is widened to int16 first (exact) and
    resized to int48 sums. Requantized once."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    scale, offset, border = [], [], []
    for size, out_size in ((h, oh), (w, ow)):
        g = math.gcd(2 * out_size, 2 * size, size - out_size)
        scale += [2 * out_size // g, 2 * size // g]
        offset.append((size - out_size) // g)
        border.append((out_size - size) // g)
    shift = out.qparams.zero_point - x.qparams.zero_point
    if x.dtype == "int8" and x.qparams.scale == out.qparams.scale and -128 <= shift <= 127:
        source, sums_type, out_zp = lw.nhwc(x), "int32", shift
    else:
        source = lw.rescale(lw.nhwc(x), [n, h, w, c], x.dtype, "int16", 1.0, x.qparams.zero_point, 0)
        sums_type, out_zp = "int48", out.qparams.zero_point
    sums = lw.inter([n, oh, ow, c], sums_type)
    lw.emit(
        "RESIZE",
        [source, lw.shape_const(scale), lw.shape_const(offset), lw.shape_const(border)],
        [sums],
        attr("Resize", ts.ResizeMode.BILINEAR),
    )
    requant = x.qparams.scale / (scale[0] * scale[2] * out.qparams.scale)
    lw.result(out, lw.rescale(sums, [n, oh, ow, c], sums_type, out.dtype, requant, 0, out_zp), True)


def aligned_taps(size: int, out_size: int) -> np.ndarray:
    """[out_size, size] integer weights, in units of 1 / max(out_size - 1, 1), of the input
    samples making each output sample of align_corners=True interpolation (PyTorch's source
    coordinate i * (size - 1) / (out_size - 1); 0 for one output sample)."""
    d = max(out_size - 1, 1)
    taps = np.zeros((out_size, size), np.int64)
    for i in range(out_size):
        j, r = divmod(i * (size - 1), d) if out_size > 1 else (0, 0)
        taps[i, j] += d - r
        if r:
            taps[i, j + 1] += r
    return taps


def _bilinear_aligned(lw: Lowerer, x: Value, out: Value):
    """Bilinear resizing with align_corners (int8, output sides up to 128, so that the taps'
    unit 1/(side - 1) leaves them within int8: a support rule), separably and exactly: along W
    a 1x1 CONV2D of each row [.., W] by the integer taps (aligned_taps, in units of 1/dw),
    whose int32 sums (at most dw * 255) are exact in int16; along H a 1x1 CONV2D of that int16
    by the H taps into int48; one RESCALE by x's scale / (dw * dh * the output's). Transposes
    bring W, then H, innermost. Also on Ethos-U85, where one RESIZE (scale 2 (oh - 1) / 2 (h - 1))
    leaves a RESCALE of int32 by 1 / (4 (oh - 1) (ow - 1)) that Vela cannot fold: unet_tiny,
    ethos-u85-256 Dedicated_Sram_384KB, 130,027 NPU cycles this way against 135,741."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    rows = lw.to_layout(lw.nhwc(x), [n, h, w, c], x.dtype, (0, 1, 3, 2))  # [n, h, c, w]

    def along_last(name: str, count: int, size: int, taps: np.ndarray, dtype: str, zp: int) -> str:
        acc_type = ACCUMULATOR[dtype]
        flat = lw.reshape(name, [1, count, 1, size], dtype)
        acc = lw.inter([1, count, 1, len(taps)], acc_type)
        lw.emit(
            "CONV2D",
            [
                flat,
                lw.const(taps[:, None, None, :], "int8", "taps"),
                biases(lw, None, len(taps), acc_type),
                lw.zp(zp, dtype),
                lw.zp(0, "int8"),
            ],
            [acc],
            attr("Conv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type]),
        )
        return acc

    wide = along_last(rows, n * h * c, w, aligned_taps(w, ow), x.dtype, x.qparams.zero_point)
    wide = lw.rescale(wide, [1, n * h * c, 1, ow], "int32", "int16", 1.0)  # exact: |sum| <= 127 * 255
    columns = lw.to_layout(lw.reshape(wide, [n, h, c, ow], "int16"), [n, h, c, ow], "int16", (0, 2, 3, 1))
    tall = along_last(columns, n * c * ow, h, aligned_taps(h, oh), "int16", 0)  # [1, n*c*ow, 1, oh] int48
    scale = x.qparams.scale / (max(ow - 1, 1) * max(oh - 1, 1) * out.qparams.scale)
    result = lw.rescale(tall, [1, n * c * ow, 1, oh], "int48", out.dtype, scale, 0, out.qparams.zero_point)
    nhwc = lw.to_layout(lw.reshape(result, [n, c, ow, oh], out.dtype), [n, c, ow, oh], out.dtype, (0, 3, 2, 1))
    lw.result(out, nhwc, True)


def _replicate_pad(lw: Lowerer, name: str, shape, dtype: str) -> str:
    """NHWC `name` with one more row above and below and one more column left and right,
    copies of the edge samples."""
    n, h, w, c = shape
    top, bottom = (slice_of(lw, name, [0, r, 0, 0], [n, 1, w, c], dtype) for r in (0, h - 1))
    tall = lw.inter([n, h + 2, w, c], dtype)
    lw.emit("CONCAT", [top, name, bottom], [tall], attr("Concat", 1))
    left, right = (slice_of(lw, tall, [0, 0, col, 0], [n, h + 2, 1, c], dtype) for col in (0, w - 1))
    out = lw.inter([n, h + 2, w + 2, c], dtype)
    lw.emit("CONCAT", [left, tall, right], [out], attr("Concat", 2))
    return out
