"""Random TOSA graphs of operations Vela places on the Ethos-U85 only (generators in the
style of npu_cases: each adds one independent subgraph; every choice from the rng)."""

from __future__ import annotations

import numpy as np
import tosa_serializer as ts

from tests.simulator.npu_cases import Graph, _rand, _shapes_with_broadcast, attr


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

    inputs = [
        x,
        shape_const("scale", [ny, dy, nx, dx]),
        shape_const("offset", [oy, ox]),
        shape_const("border", [by, bx]),
    ]
    mode = ts.ResizeMode.BILINEAR if bilinear else ts.ResizeMode.NEAREST
    shape = (1, out_h, out_w, c)
    text = (
        f"RESIZE {'BILINEAR' if bilinear else 'NEAREST'} in {h}x{w}x{c} scale {ny}/{dy},{nx}/{dx} "
        f"offset {oy},{ox} border {by},{bx}"
    )
    if bilinear:
        acc = g.op("RESIZE", inputs, shape, "int32", attr("Resize", mode))
        out = g.rescale(acc, shape, "int32", "int8", [1.0 / (ny * nx)])
    else:
        out = g.op("RESIZE", inputs, shape, "int8", attr("Resize", mode))
    g.output(out, text)


def _op(g: Graph, kind: str, inputs: list[str], shape, dtype, attribute) -> str:
    """g.op for any TOSA dtype enum (bool outputs included)."""
    tensor = g.ser.addIntermediate(list(shape), dtype)
    g.tensors[tensor.name] = tensor
    g.ser.addOperator(getattr(ts.Op, kind), inputs, [tensor.name], attribute)
    return tensor.name


def intdiv(g: Graph, rng) -> None:
    a_shape, b_shape, out_shape = _shapes_with_broadcast(rng)
    a = _rand(rng, a_shape, "int32", -(1 << 20), 1 << 20)
    b = _rand(rng, b_shape, "int32", -300, 300)
    b[b == 0] = 7
    out = g.op("INTDIV", [g.input(a, "int32"), g.input(b, "int32")], out_shape, "int32", attr("IntDiv"))
    g.output(out, f"INTDIV int32 {a_shape} {b_shape}")


def compare(g: Graph, rng) -> None:
    a_shape, b_shape, out_shape = _shapes_with_broadcast(rng)
    dtype = "int32"  # TOSA's comparisons take int32
    kind = str(rng.choice(["EQUAL", "GREATER", "GREATER_EQUAL"]))
    lo, hi = (-4, 4) if kind == "EQUAL" else (None, None)  # equal values must occur
    a = g.input(_rand(rng, a_shape, dtype, lo, hi), dtype)
    b = g.input(_rand(rng, b_shape, dtype, lo, hi), dtype)
    name = "".join(part.capitalize() for part in kind.split("_"))
    out = _op(g, kind, [a, b], out_shape, ts.DType.BOOL, attr(name))
    g.output(out, f"{kind} {dtype} {a_shape} {b_shape}")


def bitwise(g: Graph, rng) -> None:
    a_shape, b_shape, out_shape = _shapes_with_broadcast(rng)
    dtype = str(rng.choice(["int8", "int16", "int32"]))
    kind = str(rng.choice(["BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "BITWISE_NOT"]))
    name = "".join(part.capitalize() for part in kind.split("_"))
    a = g.input(_rand(rng, a_shape, dtype), dtype)
    if kind == "BITWISE_NOT":
        out = g.op(kind, [a], a_shape, dtype, attr(name))
    else:
        out = g.op(kind, [a, g.input(_rand(rng, b_shape, dtype), dtype)], out_shape, dtype, attr(name))
    g.output(out, f"{kind} {dtype} {a_shape} {b_shape}")


def logical(g: Graph, rng) -> None:
    """Bools from comparisons, combined by LOGICAL_AND/OR/XOR/NOT."""
    a_shape, b_shape, out_shape = _shapes_with_broadcast(rng)
    kind = str(rng.choice(["LOGICAL_AND", "LOGICAL_OR", "LOGICAL_XOR", "LOGICAL_NOT"]))
    name = "".join(part.capitalize() for part in kind.split("_"))
    x = g.input(_rand(rng, a_shape, "int8"), "int32")
    zero = g.const(np.zeros([1] * len(a_shape)), "int32")
    pa = _op(g, "GREATER", [x, zero], a_shape, ts.DType.BOOL, attr("Greater"))
    if kind == "LOGICAL_NOT":
        out = _op(g, kind, [pa], a_shape, ts.DType.BOOL, attr(name))
    else:
        y = g.input(_rand(rng, b_shape, "int8"), "int32")
        pb = _op(
            g,
            "GREATER",
            [y, g.const(np.full([1] * len(b_shape), 20), "int32")],
            b_shape,
            ts.DType.BOOL,
            attr("Greater"),
        )
        out = _op(g, kind, [pa, pb], out_shape, ts.DType.BOOL, attr(name))
    g.output(out, f"{kind} {a_shape} {b_shape}")


def shifts(g: Graph, rng) -> None:
    shape = [1, int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 20))]
    dtype = str(rng.choice(["int8", "int16", "int32"]))
    bits = int(dtype[3:])
    kind = str(rng.choice(["LOGICAL_RIGHT_SHIFT", "LOGICAL_LEFT_SHIFT", "ARITHMETIC_RIGHT_SHIFT"]))
    a = g.input(_rand(rng, shape, dtype), dtype)
    b = g.input(_rand(rng, shape, dtype, 0, bits - 1), dtype)
    if kind == "ARITHMETIC_RIGHT_SHIFT":
        rnd = bool(rng.random() < 0.5)
        out = g.op(kind, [a, b], shape, dtype, attr("ArithmeticRightShift", rnd))
        kind += f" round {rnd}"
    else:
        name = "".join(part.capitalize() for part in kind.split("_"))
        out = g.op(kind, [a, b], shape, dtype, attr(name))
    g.output(out, f"{kind} {dtype} {shape}")


def transpose(g: Graph, rng) -> None:
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.integers(1, 20))]
    perm = [int(p) for p in rng.permutation(4)]
    dtype = str(rng.choice(["int8", "int16"]))
    out = g.op(
        "TRANSPOSE",
        [g.input(_rand(rng, shape, dtype), dtype)],
        [shape[p] for p in perm],
        dtype,
        attr("Transpose", perm),
    )
    g.output(out, f"TRANSPOSE {dtype} {shape} perm {perm}")


def reduce_min_max(g: Graph, rng) -> None:
    shape = [1, int(rng.integers(1, 8)), int(rng.integers(1, 8)), int(rng.integers(1, 30))]
    axis = int(rng.integers(1, 4))
    kind = str(rng.choice(["REDUCE_MIN", "REDUCE_MAX"]))
    dtype = str(rng.choice(["int8", "int16"]))
    out_shape = list(shape)
    out_shape[axis] = 1
    name = "ReduceMin" if kind == "REDUCE_MIN" else "ReduceMax"
    out = g.op(
        kind,
        [g.input(_rand(rng, shape, dtype), dtype)],
        out_shape,
        dtype,
        attr(name, axis, ts.NanPropagationMode.PROPAGATE),
    )
    g.output(out, f"{kind} {dtype} {shape} axis {axis}")


def argmax(g: Graph, rng) -> None:
    shape = [1, int(rng.integers(1, 8)), int(rng.integers(1, 8)), int(rng.integers(1, 30))]
    axis = int(rng.integers(1, 4))
    out_shape = [d for i, d in enumerate(shape) if i != axis]
    x = g.input(_rand(rng, shape, "int8", -4, 4), "int8")  # ties: the first index wins
    out = g.op("ARGMAX", [x], out_shape, "int32", attr("ArgMax", axis, ts.NanPropagationMode.PROPAGATE))
    g.output(out, f"ARGMAX int8 {shape} axis {axis}")


def gather(g: Graph, rng) -> None:
    n, k, c, w = 1, int(rng.integers(1, 20)), int(rng.integers(1, 24)), int(rng.integers(1, 20))
    values = g.input(_rand(rng, (n, k, c), "int8"), "int8")
    indices = g.input(rng.integers(0, k, size=(n, w)).astype(np.int32), "int32")
    out = g.op("GATHER", [values, indices], (n, w, c), "int8", attr("Gather"))
    g.output(out, f"GATHER int8 K {k} C {c} W {w}")


def reverse(g: Graph, rng) -> None:
    shape = [1, int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.integers(1, 20))]
    axis = int(rng.integers(1, 4))
    dtype = str(rng.choice(["int8", "int16"]))
    out = g.op("REVERSE", [g.input(_rand(rng, shape, dtype), dtype)], shape, dtype, attr("Reverse", axis))
    g.output(out, f"REVERSE {dtype} {shape} axis {axis}")


def scatter(g: Graph, rng) -> None:
    """SCATTER of W int8 or int16 rows into K, in N >= 1 planes (several: Vela's 3-D indexed DMA, as
    a KV cache [1, heads, T, D] updated along T takes them); each plane's indices distinct (TOSA
    leaves repeated ones undefined)."""
    n, k, c = int(rng.integers(1, 5)), int(rng.integers(2, 20)), int(rng.integers(1, 24))
    w = int(rng.integers(1, k + 1))
    dtype = str(rng.choice(["int8", "int16"]))
    values_in = g.input(_rand(rng, (n, k, c), dtype), dtype)
    indices = g.input(np.stack([rng.permutation(k)[:w] for _ in range(n)]).astype(np.int32), "int32")
    source = g.input(_rand(rng, (n, w, c), dtype), dtype)
    out = g.op("SCATTER", [values_in, indices, source], (n, k, c), dtype, attr("Scatter"))
    g.output(out, f"SCATTER {dtype} N {n} K {k} C {c} W {w}")


def scalar_first(g: Graph, rng) -> None:
    """An int32 SUB, MUL or MAXIMUM whose first operand is a constant scalar."""
    shape = [1, int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.integers(1, 20))]
    kind = str(rng.choice(["SUB", "MUL", "MAXIMUM"]))
    scalar = g.const(np.full([1, 1, 1, 1], int(rng.integers(-1000, 1000))), "int32")
    x = g.input(_rand(rng, shape, "int32", -(1 << 12), 1 << 12), "int32")
    if kind == "MUL":
        out = g.op(kind, [scalar, x, g.const(np.zeros([1]), "int8")], shape, "int32", attr("Mul"))
    elif kind == "SUB":
        out = g.op(kind, [scalar, x], shape, "int32", attr("Sub"))
    else:
        out = g.op(kind, [scalar, x], shape, "int32", attr("Maximum", ts.NanPropagationMode.PROPAGATE))
    g.output(out, f"{kind} int32 scalar first {shape}")


def table16_wide(g: Graph, rng) -> None:
    """int16 TABLE with its int32 result as the output (no rescale after it)."""
    shape = [1, int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 20))]
    steps = np.clip(rng.integers(-300, 300, size=513).cumsum() + int(rng.integers(-20000, 0)), -32768, 32767)
    x = g.input(_rand(rng, shape, "int16"), "int16")
    out = g.op("TABLE", [x, g.const(steps, "int16")], shape, "int32", attr("Table"))
    g.output(out, f"TABLE int16 -> int32 {shape}")


def argmax_low_rank(g: Graph, rng) -> None:
    """ARGMAX of a rank-2 or rank-3 tensor over any axis."""
    rank = int(rng.integers(2, 4))
    shape = [int(rng.integers(1, 9)) for _ in range(rank)]
    axis = int(rng.integers(0, rank))
    out_shape = [d for i, d in enumerate(shape) if i != axis]
    x = g.input(_rand(rng, shape, "int8", -4, 4), "int8")
    out = g.op("ARGMAX", [x], out_shape, "int32", attr("ArgMax", axis, ts.NanPropagationMode.PROPAGATE))
    g.output(out, f"ARGMAX int8 {shape} axis {axis}")


def matmul(g: Graph, rng) -> None:
    """MATMUL of two inputs (weights from a feature map): int8 (zero points, int32 result)
    or int16 (int48 result), rescaled back."""
    n, h, c, w = int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 40)), int(rng.integers(1, 24))
    dtype = "int16" if rng.random() < 0.3 else "int8"
    za, zb = (0, 0) if dtype == "int16" else (int(rng.integers(-20, 21)), int(rng.integers(-20, 21)))
    acc_dtype = "int48" if dtype == "int16" else "int32"
    a = g.input(_rand(rng, (n, h, c), dtype), dtype)
    b = g.input(_rand(rng, (n, c, w), dtype), dtype)
    acc = g.op("MATMUL", [a, b, g.zp(za, dtype), g.zp(zb, dtype)], (n, h, w), acc_dtype, attr("MatMul"))
    out = g.rescale(acc, (n, h, w), acc_dtype, dtype, [(64 if dtype == "int16" else 1) / (40 * max(c, 1))])
    g.output(out, f"MATMUL {dtype} {n}x{h}x{c} @ {c}x{w} zp {za},{zb}")


def attention_scores(g: Graph, rng) -> None:
    """Q @ K^T as attention computes it: K transposed by a TRANSPOSE, int16 or int8."""
    n, t, d = int(rng.integers(1, 4)), int(rng.integers(2, 20)), int(rng.integers(2, 33))
    dtype = "int16" if rng.random() < 0.6 else "int8"
    acc_dtype = "int48" if dtype == "int16" else "int32"
    q = g.input(_rand(rng, (n, t, d), dtype), dtype)
    k = g.input(_rand(rng, (n, t, d), dtype), dtype)
    kt = g.op("TRANSPOSE", [k], (n, d, t), dtype, attr("Transpose", [0, 2, 1]))
    acc = g.op("MATMUL", [q, kt, g.zp(0, dtype), g.zp(0, dtype)], (n, t, t), acc_dtype, attr("MatMul"))
    out = g.rescale(acc, (n, t, t), acc_dtype, dtype, [(64 if dtype == "int16" else 1) / (40 * d)])
    g.output(out, f"Q@K^T {dtype} heads {n} tokens {t} dim {d}")


GENERATORS = {
    "resize_nearest_any": lambda g, rng: resize(g, rng, False),
    "resize_bilinear": lambda g, rng: resize(g, rng, True),
    "intdiv": intdiv,
    "compare": compare,
    "bitwise": bitwise,
    "logical": logical,
    "shifts": shifts,
    "transpose": transpose,
    "reduce_min_max": reduce_min_max,
    "argmax": argmax,
    "gather": gather,
    "reverse": reverse,
    "scatter": scatter,
    "scalar_first": scalar_first,
    "table16_wide": table16_wide,
    "argmax_low_rank": argmax_low_rank,
    "matmul": matmul,
    "attention_scores": attention_scores,
}
