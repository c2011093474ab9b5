"""Random TOSA graphs of operations Vela places on the Ethos-U85 only (generators in the
style of npu_cases: each adds one independent subgraph; every choice from the rng)."""

from __future__ import annotations

import numpy as np
import tosa_serializer as ts

from npu_cases import Graph, _rand, attr


def _resize_axis(rng, size: int) -> tuple[int, int, int, int, int]:
    """(scale n, scale d, offset, border, output size) of one axis, TOSA's ERROR_IF rules kept."""
    n = int(rng.choice([1, 2, 4, 8]))
    d = int(rng.integers(1, 2 * n + 1))
    offset = int(rng.integers(-n + 1, 1)) if n > 1 else 0
    base = (size - 1) * n - offset
    out = base // d + 1
    return n, d, offset, (out - 1) * d - base, out


def resize(g: Graph, rng, bilinear: bool) -> None:
    """RESIZE at random whole-number scales n/d (n a power of two), offsets and borders;
    BILINEAR's int32 result rescaled by 1 / (n_y n_x) to int8."""
    h, w, c = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 20))
    ny, dy, oy, by, out_h = _resize_axis(rng, h)
    nx, dx, ox, bx, out_w = _resize_axis(rng, w)
    x = g.input(_rand(rng, (1, h, w, c), "int8"), "int8")

    def shape_const(stem, values):
        return g.ser.addConst([len(values)], ts.DType.SHAPE, np.array(values, np.int64), name=g.name(stem)).name

    inputs = [x, shape_const("scale", [ny, dy, nx, dx]), shape_const("offset", [oy, ox]),
              shape_const("border", [by, bx])]
    mode = ts.ResizeMode.BILINEAR if bilinear else ts.ResizeMode.NEAREST
    shape = (1, out_h, out_w, c)
    text = f"RESIZE {'BILINEAR' if bilinear else 'NEAREST'} in {h}x{w}x{c} scale {ny}/{dy},{nx}/{dx} " \
           f"offset {oy},{ox} border {by},{bx}"
    if bilinear:
        acc = g.op("RESIZE", inputs, shape, "int32", attr("Resize", mode))
        out = g.rescale(acc, shape, "int32", "int8", [1.0 / (ny * nx)])
    else:
        out = g.op("RESIZE", inputs, shape, "int8", attr("Resize", mode))
    g.output(out, text)


GENERATORS = {
    "resize_nearest_any": lambda g, rng: resize(g, rng, False),
    "resize_bilinear": lambda g, rng: resize(g, rng, True),
}
