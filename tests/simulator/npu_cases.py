"""Random TOSA 1.0 INT graphs for differential tests of kiln's NPU model.

Each generator adds one independent subgraph (its own input(s) and output) to a Graph, so
several cases share one Vela call. Every random choice comes from the numpy Generator
passed in, so a case is reproduced by its seed. Shapes, strides, padding and scales are
drawn so that TOSA's ERROR_IF rules hold and results are not all saturated."""

from __future__ import annotations

import math

import numpy as np
import tosa_serializer as ts

DT = {"int8": ts.DType.INT8, "int16": ts.DType.INT16, "int32": ts.DType.INT32, "int48": ts.DType.INT48}
RANGE = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(1 << 31), (1 << 31) - 1)}


def attr(kind: str, *args) -> ts.TosaSerializerAttribute:
    attribute = ts.TosaSerializerAttribute()
    getattr(attribute, f"{kind}Attribute")(*args)
    return attribute


def multiplier_for(scale: float, bits: int = 32) -> tuple[int, int]:
    """(multiplier in [2^(bits-2), 2^(bits-1)), shift in 2..62) with multiplier / 2^shift ~ scale."""
    mantissa, exponent = math.frexp(scale)
    multiplier = min(round(mantissa * (1 << (bits - 1))), (1 << (bits - 1)) - 1)
    shift = bits - 1 - exponent
    return multiplier, max(2, min(shift, 62))


class Graph:
    def __init__(self):
        self.ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
        self.inputs: list[np.ndarray] = []
        self.tensors: dict[str, object] = {}
        self.count = 0
        self.descriptions: list[str] = []

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def input(self, array: np.ndarray, dtype: str) -> str:
        tensor = ts.TosaSerializerTensor(self.name("input"), list(array.shape), DT[dtype])
        self.ser.addInputTensor(tensor)
        self.tensors[tensor.name] = tensor
        self.inputs.append(np.ascontiguousarray(array.astype(dtype)))  # int8/int16/int32 only
        return tensor.name

    def const(self, array, dtype: str) -> str:
        array = np.ascontiguousarray(np.asarray(array), dtype=np.int64 if dtype == "int48" else dtype)
        name = self.name("const")
        self.ser.addConst(list(array.shape), DT[dtype], array, name=name)
        return name

    def inter(self, shape, dtype: str) -> str:
        tensor = self.ser.addIntermediate(list(shape), DT[dtype])
        self.tensors[tensor.name] = tensor
        return tensor.name

    def op(self, kind: str, inputs: list[str], shape, dtype: str, attribute) -> str:
        out = self.inter(shape, dtype)
        self.ser.addOperator(getattr(ts.Op, kind), inputs, [out], attribute)
        return out

    def output(self, name: str, description: str) -> None:
        self.ser.addOutputTensor(self.tensors[name])
        self.descriptions.append(description)

    def zp(self, value: int, dtype: str) -> str:
        return self.const([value], dtype)

    def rescale(
        self,
        x: str,
        shape,
        in_dtype: str,
        out_dtype: str,
        scales,
        in_zp: int = 0,
        out_zp: int = 0,
        double_round: bool = False,
    ) -> str:
        scales = np.atleast_1d(np.asarray(scales, np.float64))
        scale32 = in_dtype != "int48"  # TOSA: a 48-bit input takes 16-bit multipliers
        pairs = [multiplier_for(float(s), 32 if scale32 else 16) for s in scales]
        mode = ts.RoundingMode.DOUBLE_ROUND if double_round and scale32 else ts.RoundingMode.SINGLE_ROUND
        multipliers = self.const([m for m, _ in pairs], "int32" if scale32 else "int16")
        return self.op(
            "RESCALE",
            [
                x,
                multipliers,
                self.const([s for _, s in pairs], "int8"),
                self.zp(in_zp, in_dtype),
                self.zp(out_zp, out_dtype),
            ],
            shape,
            out_dtype,
            attr("Rescale", scale32, mode, len(pairs) > 1, False, False),
        )

    def serialize(self) -> bytes:
        return self.ser.serialize()


def _rand(rng, shape, dtype: str, lo=None, hi=None) -> np.ndarray:
    low, high = RANGE[dtype]
    return rng.integers(low if lo is None else lo, (high if hi is None else hi) + 1, size=shape, dtype=np.int64)


def _geometry(rng, kernel: int, stride: int, dilation: int, max_size: int = 14):
    """(input size, pad before, pad after, output size) with (size + pads - extent) % stride == 0."""
    extent = (kernel - 1) * dilation + 1
    for _ in range(50):
        size = int(rng.integers(1, max_size + 1))
        before = int(rng.integers(0, kernel)) if rng.random() < 0.6 else 0
        after = int(rng.integers(0, kernel)) if rng.random() < 0.6 else 0
        span = size + before + after - extent
        if span >= 0 and span % stride == 0:
            return size, before, after, span // stride + 1
    return extent, 0, 0, 1


def _output_stage(
    g: Graph,
    rng,
    acc: str,
    shape,
    acc_dtype: str,
    out_dtype: str,
    spread: float,
    channels: int,
    per_channel: bool = True,
) -> tuple[str, str]:
    """RESCALE of an accumulator to the output type (random scale, zero point, rounding) and
    sometimes a CLAMP; returns (name, description)."""
    lo, hi = RANGE[out_dtype]
    target = (hi - lo) / 4
    base = target / max(spread, 1.0)
    scales = base * np.exp(rng.uniform(-0.7, 0.7, size=channels if per_channel else 1))
    out_zp = int(rng.integers(-20, 21)) if out_dtype == "int8" else 0
    double_round = bool(rng.random() < 0.4)
    name = g.rescale(acc, shape, acc_dtype, out_dtype, scales, 0, out_zp, double_round)
    text = f"rescale {'double' if double_round else 'single'} zp {out_zp}"
    if rng.random() < 0.3:
        a = int(rng.integers(lo, (lo + hi) // 2))
        b = int(rng.integers((lo + hi) // 2, hi + 1))
        as_bytes = lambda v: list(np.array([v], out_dtype).view(np.uint8))  # noqa: E731
        name = g.op(
            "CLAMP", [name], shape, out_dtype, attr("Clamp", as_bytes(a), as_bytes(b), ts.NanPropagationMode.PROPAGATE)
        )
        text += f" clamp [{a},{b}]"
    return name, text


def conv(g: Graph, rng, depthwise: bool = False, int16: bool = False) -> None:
    kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    if rng.random() < 0.12:
        kh, kw = int(rng.integers(6, 11)), int(rng.integers(6, 11))
    sy, sx = (int(rng.integers(1, 4)), int(rng.integers(1, 4))) if rng.random() < 0.4 else (1, 1)
    dy, dx = (2, 2) if rng.random() < 0.15 else (1, 1)
    h, pt, pb, oh = _geometry(rng, kh, sy, dy)
    w, pl, pr, ow = _geometry(rng, kw, sx, dx)
    cin = int(rng.integers(1, 24 if depthwise else 48))
    cout = cin if depthwise else int(rng.integers(1, 40))
    in_dtype = "int16" if int16 else "int8"
    in_zp = 0 if int16 else int(rng.integers(-128, 128))
    x = g.input(_rand(rng, (1, h, w, cin), in_dtype), in_dtype)
    acc_dtype = "int48" if int16 else "int32"
    bias_dtype = "int48" if int16 else "int32"
    taps = kh * kw * (1 if depthwise else cin)
    amplitude = 128 * (256 if int16 else 1)
    bias = _rand(rng, (cout,), "int32", -amplitude * 64, amplitude * 64)
    zps = [g.zp(in_zp, in_dtype), g.zp(0, "int8")]
    if depthwise:
        weights = _rand(rng, (kh, kw, cin, 1), "int8")
        kind, attribute = (
            "DEPTHWISE_CONV2D",
            attr("DepthwiseConv2d", [pt, pb, pl, pr], [sy, sx], [dy, dx], False, DT[acc_dtype]),
        )
    else:
        weights = _rand(rng, (cout, kh, kw, cin), "int8")
        kind, attribute = "CONV2D", attr("Conv2d", [pt, pb, pl, pr], [sy, sx], [dy, dx], False, DT[acc_dtype])
    acc = g.op(
        kind, [x, g.const(weights, "int8"), g.const(bias, bias_dtype), *zps], (1, oh, ow, cout), acc_dtype, attribute
    )
    spread = amplitude * 80 * math.sqrt(taps)
    out_dtype = "int16" if int16 else "int8"
    out, text = _output_stage(g, rng, acc, (1, oh, ow, cout), acc_dtype, out_dtype, spread, cout)
    g.output(
        out,
        f"{kind} {in_dtype} in {h}x{w}x{cin} k {kh}x{kw} s {sy}x{sx} d {dy}x{dx} "
        f"pad {pt},{pb},{pl},{pr} cout {cout} zp {in_zp}; {text}",
    )


def pool(g: Graph, rng, average: bool, dtype: str = "int8") -> None:
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    sy, sx = (int(rng.integers(1, 4)), int(rng.integers(1, 4))) if rng.random() < 0.5 else (1, 1)
    h, pt, pb, oh = _geometry(rng, kh, sy, 1)
    w, pl, pr, ow = _geometry(rng, kw, sx, 1)
    c = int(rng.integers(1, 40))
    x = g.input(_rand(rng, (1, h, w, c), dtype), dtype)
    if average:
        in_zp, out_zp = (int(rng.integers(-128, 128)), int(rng.integers(-128, 128))) if dtype == "int8" else (0, 0)
        out = g.op(
            "AVG_POOL2D",
            [x, g.zp(in_zp, dtype), g.zp(out_zp, dtype)],
            (1, oh, ow, c),
            dtype,
            attr("AvgPool2d", [kh, kw], [sy, sx], [pt, pb, pl, pr], ts.DType.INT32),
        )
        text = f"AVG_POOL2D {dtype} zp {in_zp}->{out_zp}"
    else:
        # MAX_POOL2D requires pads smaller than the kernel, and at least one real sample per window
        out = g.op(
            "MAX_POOL2D",
            [x],
            (1, oh, ow, c),
            dtype,
            attr("MaxPool2d", [kh, kw], [sy, sx], [pt, pb, pl, pr], ts.NanPropagationMode.PROPAGATE),
        )
        text = f"MAX_POOL2D {dtype}"
    g.output(out, f"{text} in {h}x{w}x{c} k {kh}x{kw} s {sy}x{sx} pad {pt},{pb},{pl},{pr}")


def _shapes_with_broadcast(rng):
    h, w, c = int(rng.integers(1, 10)), int(rng.integers(1, 10)), int(rng.integers(1, 40))
    a = [1, h, w, c]
    b = list(a)
    if rng.random() < 0.4:
        for axis in (1, 2, 3):
            if rng.random() < 0.4:
                b[axis] = 1
    if rng.random() < 0.5:
        a, b = b, a
    out = [max(p, q) for p, q in zip(a, b)]
    return a, b, out


def add_sub(g: Graph, rng, dtype: str = "int8") -> None:
    """The TFLite-style quantized add: both operands rescaled to a common 2^shift fixed
    point in int32, added, rescaled to the output."""
    a_shape, b_shape, out_shape = _shapes_with_broadcast(rng)
    kind = "ADD" if rng.random() < 0.6 else "SUB"
    sa, sb, so = (float(np.exp(rng.uniform(-5, -1))) for _ in range(3))
    za, zb, zo = (int(rng.integers(-128, 128)) for _ in range(3)) if dtype == "int8" else (0, 0, 0)
    shift = 20 if dtype == "int8" else 15
    top = 2 * max(sa, sb)
    a = g.input(_rand(rng, a_shape, dtype), dtype)
    b = g.input(_rand(rng, b_shape, dtype), dtype)
    wa = g.rescale(a, a_shape, dtype, "int32", sa / top * (1 << shift), za, 0)
    wb = g.rescale(b, b_shape, dtype, "int32", sb / top * (1 << shift), zb, 0)
    acc = g.op(kind, [wa, wb], out_shape, "int32", attr("Add" if kind == "ADD" else "Sub"))
    out = g.rescale(acc, out_shape, "int32", dtype, top / ((1 << shift) * so), 0, zo)
    g.output(out, f"{kind} {dtype} {a_shape} {b_shape} scales {sa:.4g},{sb:.4g}->{so:.4g} zp {za},{zb}->{zo}")


def mul(g: Graph, rng) -> None:
    a_shape, b_shape, out_shape = _shapes_with_broadcast(rng)
    za, zb, zo = (int(rng.integers(-128, 128)) for _ in range(3))
    a = g.input(_rand(rng, a_shape, "int8"), "int8")
    b = g.input(_rand(rng, b_shape, "int8"), "int8")
    wa = g.rescale(a, a_shape, "int8", "int32", 1.0, za, 0)
    wb = g.rescale(b, b_shape, "int8", "int32", 1.0, zb, 0)
    acc = g.op("MUL", [wa, wb, g.const([0], "int8")], out_shape, "int32", attr("Mul"))
    scale = float(np.exp(rng.uniform(-10, -6)))
    out = g.rescale(acc, out_shape, "int32", "int8", scale, 0, zo, bool(rng.random() < 0.4))
    g.output(out, f"MUL int8 {a_shape} {b_shape} zp {za},{zb}->{zo} scale {scale:.4g}")


def min_max(g: Graph, rng) -> None:
    a_shape, b_shape, out_shape = _shapes_with_broadcast(rng)
    kind = "MAXIMUM" if rng.random() < 0.5 else "MINIMUM"
    za, zb, zo = (int(rng.integers(-128, 128)) for _ in range(3))
    a = g.input(_rand(rng, a_shape, "int8"), "int8")
    b = g.input(_rand(rng, b_shape, "int8"), "int8")
    wa = g.rescale(a, a_shape, "int8", "int32", 1.0, za, 0)
    wb = g.rescale(b, b_shape, "int8", "int32", 1.0, zb, 0)
    y = g.op(
        kind,
        [wa, wb],
        out_shape,
        "int32",
        attr("Maximum" if kind == "MAXIMUM" else "Minimum", ts.NanPropagationMode.PROPAGATE),
    )
    out = g.rescale(y, out_shape, "int32", "int8", float(np.exp(rng.uniform(-1, 0.5))), 0, zo)
    g.output(out, f"{kind} int32 {a_shape} {b_shape} zp {za},{zb}->{zo}")


def table(g: Graph, rng) -> None:
    shape = [1, int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 40))]
    x = g.input(_rand(rng, shape, "int8"), "int8")
    values = _rand(rng, (256,), "int8")
    out = g.op("TABLE", [x, g.const(values, "int8")], shape, "int8", attr("Table"))
    g.output(out, f"TABLE int8 {shape}")


def table16(g: Graph, rng) -> None:
    """int16 TABLE (513 entries, interpolating, int32 result) and a RESCALE back to int16."""
    shape = [1, int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 24))]
    x = g.input(_rand(rng, shape, "int16"), "int16")
    start = int(rng.integers(-20000, 0))
    steps = rng.integers(-300, 300, size=513).cumsum() + start
    values = np.clip(steps, -32768, 32767)
    y = g.op("TABLE", [x, g.const(values, "int16")], shape, "int32", attr("Table"))
    out = g.rescale(y, shape, "int32", "int16", 1.0 / 128, 0, 0)
    g.output(out, f"TABLE int16 {shape}")


def rescale_unsigned(g: Graph, rng) -> None:
    """RESCALE between uint8 and int8 (TOSA's input_unsigned/output_unsigned)."""
    shape = [1, int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 40))]
    unsigned_in = bool(rng.random() < 0.5)
    in_zp = int(rng.integers(0, 256)) if unsigned_in else int(rng.integers(-128, 128))
    out_zp = int(rng.integers(-128, 128)) if unsigned_in else int(rng.integers(0, 256))
    x = g.input(_rand(rng, shape, "int8"), "int8")
    scale = float(np.exp(rng.uniform(-2, 1)))
    multiplier, shift = multiplier_for(scale)
    out = g.op(
        "RESCALE",
        [
            x,
            g.const([multiplier], "int32"),
            g.const([shift], "int8"),
            g.const(np.array([in_zp], np.int64).astype(np.uint8).view(np.int8) if unsigned_in else [in_zp], "int8"),
            g.const(
                np.array([out_zp], np.int64).astype(np.uint8).view(np.int8) if not unsigned_in else [out_zp], "int8"
            ),
        ],
        shape,
        "int8",
        attr("Rescale", True, ts.RoundingMode.SINGLE_ROUND, False, unsigned_in, not unsigned_in),
    )
    g.output(
        out, f"RESCALE {'uint8->int8' if unsigned_in else 'int8->uint8'} {shape} scale {scale:.4g} zp {in_zp}->{out_zp}"
    )


def rescale_only(g: Graph, rng) -> None:
    shape = [1, int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 40))]
    in_zp, out_zp = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    x = g.input(_rand(rng, shape, "int8"), "int8")
    scale = float(np.exp(rng.uniform(-4, 1.5)))
    double_round = bool(rng.random() < 0.5)
    out = g.rescale(x, shape, "int8", "int8", scale, in_zp, out_zp, double_round)
    g.output(out, f"RESCALE int8 {shape} scale {scale:.4g} zp {in_zp}->{out_zp} double {double_round}")


def int32_unary(g: Graph, rng) -> None:
    """int8 -> int32 (scaled up) -> ABS / CLZ / shifts -> rescale back to int8."""
    shape = [1, int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.integers(1, 24))]
    x = g.input(_rand(rng, shape, "int8"), "int8")
    zp = int(rng.integers(-128, 128))
    up = float(2 ** int(rng.integers(0, 16)))
    wide = g.rescale(x, shape, "int8", "int32", up, zp, 0)
    kind = ["ABS", "CLZ", "ARITHMETIC_RIGHT_SHIFT", "LOGICAL_LEFT_SHIFT"][int(rng.integers(4))]
    if kind == "ABS":
        y = g.op("ABS", [wide], shape, "int32", attr("Abs"))
        down = 1.0 / up
    elif kind == "CLZ":
        y = g.op("CLZ", [wide], shape, "int32", attr("Clz"))
        down = 1.0
    else:
        amount = g.const(np.full([1, 1, 1, 1], int(rng.integers(0, 6))), "int32")
        if kind == "ARITHMETIC_RIGHT_SHIFT":
            rnd = bool(rng.random() < 0.5)
            y = g.op(kind, [wide, amount], shape, "int32", attr("ArithmeticRightShift", rnd))
            kind += f" round {rnd}"
        else:
            y = g.op(kind, [wide, amount], shape, "int32", attr("LogicalLeftShift"))
        down = 1.0 / (up * 32)
    out = g.rescale(y, shape, "int32", "int8", down, 0, 0)
    g.output(out, f"{kind} int32 {shape} up {up:g} zp {zp}")


def transpose_conv(g: Graph, rng) -> None:
    kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    s = 2 if rng.random() < 0.7 else 1
    h, w = int(rng.integers(1, 8)), int(rng.integers(1, 8))
    cin, cout = int(rng.integers(1, 24)), int(rng.integers(1, 24))
    pads = [0, 0, 0, 0]  # regor leaves some negative output paddings on the CPU
    oh = (h - 1) * s + pads[0] + pads[1] + kh
    ow = (w - 1) * s + pads[2] + pads[3] + kw
    zp = int(rng.integers(-128, 128))
    x = g.input(_rand(rng, (1, h, w, cin), "int8"), "int8")
    weights = _rand(rng, (cout, kh, kw, cin), "int8")
    bias = _rand(rng, (cout,), "int32", -5000, 5000)
    acc = g.op(
        "TRANSPOSE_CONV2D",
        [x, g.const(weights, "int8"), g.const(bias, "int32"), g.zp(zp, "int8"), g.zp(0, "int8")],
        (1, oh, ow, cout),
        "int32",
        attr("TransposeConv2d", pads, [s, s], False, ts.DType.INT32),
    )
    out, text = _output_stage(
        g, rng, acc, (1, oh, ow, cout), "int32", "int8", 128 * 80 * math.sqrt(kh * kw * cin), cout
    )
    g.output(out, f"TRANSPOSE_CONV2D in {h}x{w}x{cin} k {kh}x{kw} s {s} out_pad {pads} cout {cout} zp {zp}; {text}")


def resize_nearest(g: Graph, rng) -> None:
    h, w, c = int(rng.integers(1, 8)), int(rng.integers(1, 8)), int(rng.integers(1, 24))
    x = g.input(_rand(rng, (1, h, w, c), "int8"), "int8")
    scale = g.ser.addConst([4], ts.DType.SHAPE, np.array([2, 1, 2, 1], np.int64), name=g.name("scale")).name
    offset = g.ser.addConst([2], ts.DType.SHAPE, np.array([0, 0], np.int64), name=g.name("offset")).name
    border = g.ser.addConst([2], ts.DType.SHAPE, np.array([0, 0], np.int64), name=g.name("border")).name
    out = g.op(
        "RESIZE",
        [x, scale, offset, border],
        (1, 2 * h - 1, 2 * w - 1, c),
        "int8",
        attr("Resize", ts.ResizeMode.NEAREST),
    )
    g.output(out, f"RESIZE NEAREST x2 in {h}x{w}x{c}")


def reduce_sum(g: Graph, rng) -> None:
    h, w, c = int(rng.integers(1, 8)), int(rng.integers(1, 8)), int(rng.integers(1, 40))
    x = g.input(_rand(rng, (1, h, w, c), "int8"), "int8")
    wide = g.rescale(x, [1, h, w, c], "int8", "int32", 1.0, int(rng.integers(-128, 128)), 0)
    axis = int(rng.integers(1, 4))
    shape = [1, h, w, c]
    shape[axis] = 1
    y = g.op("REDUCE_SUM", [wide], shape, "int32", attr("ReduceSum", axis))
    out = g.rescale(y, shape, "int32", "int8", float(np.exp(rng.uniform(-6, -2))), 0, 0)
    g.output(out, f"REDUCE_SUM axis {axis} in {h}x{w}x{c}")


def concat(g: Graph, rng) -> None:
    h, w = int(rng.integers(1, 8)), int(rng.integers(1, 8))
    axis = int(rng.integers(1, 4))
    shapes = []
    for _ in range(2):
        s = [1, h, w, int(rng.integers(1, 20))] if axis == 3 else [1, h, w, 5]
        if axis != 3:
            s[axis] = int(rng.integers(1, 8))
        shapes.append(s)
    names = [g.input(_rand(rng, s, "int8"), "int8") for s in shapes]
    out_shape = list(shapes[0])
    out_shape[axis] = shapes[0][axis] + shapes[1][axis]
    out = g.op("CONCAT", names, out_shape, "int8", attr("Concat", axis))
    g.output(out, f"CONCAT axis {axis} {shapes}")


GENERATORS = {
    "conv": conv,
    "depthwise": lambda g, rng: conv(g, rng, depthwise=True),
    "conv_int16": lambda g, rng: conv(g, rng, int16=True),
    "avg_pool": lambda g, rng: pool(g, rng, True),
    "max_pool": lambda g, rng: pool(g, rng, False),
    "add_sub": add_sub,
    "add_sub_int16": lambda g, rng: add_sub(g, rng, "int16"),
    "avg_pool_int16": lambda g, rng: pool(g, rng, True, "int16"),
    "max_pool_int16": lambda g, rng: pool(g, rng, False, "int16"),
    "table16": table16,
    "rescale_unsigned": rescale_unsigned,
    "mul": mul,
    "min_max": min_max,
    "table": table,
    "rescale": rescale_only,
    "int32_unary": int32_unary,
    "transpose_conv": transpose_conv,
    "resize_nearest": resize_nearest,
    "reduce_sum": reduce_sum,
    "concat": concat,
}
