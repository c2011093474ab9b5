"""Ethos-U85 convolution, depthwise convolution and pooling (NPU_OP_CONV/DEPTHWISE/POOL).

The IFM geometry (kernel, stride, dilation, padding, upscaling) and the sums are the ones both
families share (kiln.simulator.npu.blockops). What the U85 adds:
- weights: one stream per core in the U85's order, or one fast-format (FWD) stream
  interleaving them (kiln.simulator.npu.u85.weights), dense or 2:4 sparse; or, with
  NPU_OP_CONV's weights_ifm2 (Vela's MATMUL, a 1x1 kernel), the IFM2 feature map;
- one scale stream for every core, with 32-bit biases for a 32-bit accumulator and
  48-bit ones for a 48-bit accumulator;
- the accumulator input (ACC_FORMAT acc_input): RESET starts from the bias, IFM2 adds
  IFM2's values (the OFM's shape, 32- or 64-bit, zero point subtracted) to it; KEEP is
  not modelled;
- AVERAGE divides each window's sum by its count of real samples whether or not there is
  padding (Vela's OFM scale then carries only the requantization);
- pooling modes SUM, MIN, NONE (the accumulator input passed through) and ARGMAX_X/Y
  (the index of the window's maximum along one axis).
"""

from __future__ import annotations

import functools
from dataclasses import astuple, dataclass

import numpy as np

from kiln.errors import NotModelled, RegisterError, WeightStreamError
from kiln.simulator.npu import blockops
from kiln.simulator.npu.arithmetic import clamp, rescale
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.memo import keeps
from kiln.simulator.npu.output import output_rounding
from kiln.simulator.npu.prepared import Hits, step
from kiln.simulator.npu.u85 import registers as u85
from kiln.simulator.npu.u85 import weights as u85_weights
from kiln.simulator.npu.u85.output import prepare_store
from kiln.simulator.npu.u85.weights import ORDER_BYTES
from kiln.simulator.npu.weights import decode_stream, kept

POOL_NAMES = {0: "MAX", 1: "AVERAGE", 2: "REDUCE_SUM", 3: "SUM", 4: "NONE", 5: "MIN", 6: "ARGMAX_X", 7: "ARGMAX_Y"}
WEIGHT_PREFIXES = ("WEIGHT", "WEIGHT1", "WEIGHT2", "WEIGHT3")
_ACC_BITS = {u85.ACC_I32: 32, u85.ACC_I48: 48}


def _accumulator(coverage, ctx: Context) -> tuple[int, int]:
    """(accumulator bits, accumulator input), recorded in `coverage` (anything with Coverage's
    hit()); refuses what is not modelled."""
    acc, source, output, _ = ctx.registers.acc_format()
    coverage.hit("accumulator", f"{_ACC_BITS[acc]}-bit")
    coverage.hit("acc_input", u85.ACC_INPUT_NAMES[source])
    if source == u85.ACC_INPUT_KEEP:
        raise NotModelled("ACC_FORMAT: accumulator input KEEP is not modelled")
    if not output:
        raise NotModelled("ACC_FORMAT: a disabled accumulator output is not modelled")
    return _ACC_BITS[acc], source


def _acc_from_ifm2(ctx: Context, shape: tuple[int, int, int]) -> np.ndarray:
    fm = ctx.registers.feature_map("IFM2")
    ctx.coverage.hit("ifm_precision", f"IFM2 {fm.type_name}")
    h, w, c = shape
    return ctx.read_fm(fm, range(h), range(w), range(c), "IFM2 read").astype(np.int64) - fm.zero_point


@dataclass(frozen=True)
class _Weights:
    """Which weights an operation reads, as its registers give them (prepared:
    kiln.simulator.npu.prepared)."""

    order: _Order
    fast: bool  # one fast-format stream, else a stream per core
    shape: tuple[int, int, int, int]  # OHWI
    depthwise: bool


def _prepare_weights(hits, ctx: Context, shape: tuple[int, int, int, int], depthwise: bool) -> _Weights:
    regs = ctx.registers
    fast, sparsity = regs.weight_format()
    config = ctx.config
    _, _, _, block = regs.acc_format()
    try:
        ofm_ublock = u85_weights.OFM_UBLOCK_DEPTH[config.total_macs][block]
    except KeyError:
        raise RegisterError(f"ACC_FORMAT: microblock {block[0]}x{block[1]} is not one of {config.target}'s") from None
    k = regs.kernel()
    ifm_bits = 8 * np.dtype(regs.ifm_dtype("IFM")[0]).itemsize
    hits.hit("cores", str(config.cores))
    hits.hit("weights", ("FWD" if fast else "SWD") + (" 2:4 sparse" if sparsity else ""))
    order = _Order(
        *shape,
        regs.param("OFM_BLK_DEPTH_M1") + 1,
        ofm_ublock,
        ifm_bits,
        depthwise,
        k.part_kernel_first,
        k.stride_x,
        k.stride_y,
        k.dilation_x,
        k.dilation_y,
        config.total_macs,
        config.cores,
        bool(sparsity),
    )
    if fast and depthwise:
        raise RegisterError("WEIGHT_FORMAT: a depthwise convolution has no fast-format weights")
    return _Weights(order, bool(fast), shape, depthwise)


def _read_weights(ctx: Context, weights: _Weights) -> np.ndarray:
    """The weights of this operation, gathered from every core's stream (or, in the fast
    weight format, from the one stream interleaving them): a depthwise convolution's OHWI,
    int64; a convolution's as blockops.tap_matrices. Kept (kiln.simulator.npu.weights.kept)
    by the registers that order them and the bytes of the streams read."""
    order = weights.order
    raws = (_stream(ctx, 0),) if weights.fast else _core_streams(ctx, order)

    def ohwi() -> np.ndarray:
        gathered = _gathered(order, weights.fast, raws).reshape(weights.shape)
        return gathered if weights.depthwise else blockops.tap_matrices(gathered)

    return kept(("U85", order, weights.fast, *raws), ohwi)


@dataclass(frozen=True)
class _Order:
    """What orders an operation's weights in its streams: u85_weights.traversal_order's
    arguments but the core."""

    ofm_depth: int
    kernel_h: int
    kernel_w: int
    ifm_depth: int
    ofm_block_depth: int
    ofm_ublock: int
    ifm_bits: int
    depthwise: bool
    part_kernel: bool
    stride_x: int
    stride_y: int
    dilation_x: int
    dilation_y: int
    macs: int
    cores: int
    sparse: bool

    def of_core(self, core: int) -> np.ndarray:
        fields = astuple(self)
        return u85_weights.traversal_order(*fields[:-1], core, fields[-1])


def _core_streams(ctx: Context, order: _Order) -> tuple[bytes | None, ...]:
    """Each core's weight stream (None for a core with none of the operation's weights). A
    read that faults is raised after the decoding error of a stream read before it, if any,
    as when each stream was decoded as soon as it was read."""
    raws: list[bytes | None] = []
    for core, used in enumerate(_cores_used(order)):
        try:
            raws.append(_stream(ctx, core) if used else None)
        except Exception:
            for raw in raws:
                if raw is not None:
                    decode_stream(raw)
            raise
    return tuple(raws)


@functools.lru_cache(maxsize=4096)
def _cores_used(order: _Order) -> tuple[bool, ...]:
    """Whether each core's stream holds any of the operation's weights."""
    return tuple(bool((order.of_core(core) >= 0).any()) for core in range(order.cores))


def _gathered(order: _Order, fast: bool, raws: tuple[bytes | None, ...]) -> np.ndarray:
    """The operation's weights, flat OHWI int64, from the streams' bytes `raws` (one per core,
    None for a core with none of them; fast: the one stream interleaving them)."""
    orders = [order.of_core(core) for core in range(order.cores)]
    if fast:
        values = u85_weights.decode_fwd(raws[0])
        block_size = u85_weights.fwd_block(
            order.ofm_ublock, order.ifm_bits, order.part_kernel, order.sparse, order.macs, order.cores
        )
        streams = u85_weights.deinterleave(values, [len(o) for o in orders], block_size)
    else:
        streams = [decode_stream(raw) if raw is not None else np.zeros(0, np.int64) for raw in raws]
    segments = []
    for core, (core_order, values, used) in enumerate(zip(orders, streams, _cores_used(order))):
        if used and len(values) < len(core_order):
            raise WeightStreamError(
                f"core {core}'s weights hold {len(values)} values, the operation needs {len(core_order)}"
            )
        segments.append(values[: len(core_order)] if used else np.zeros(len(core_order), np.int64))
    return np.concatenate([*segments, np.zeros(1, np.int64)])[_placement(order)]


@keeps(ORDER_BYTES)
def _placement(order: _Order) -> np.ndarray:
    """Per flat OHWI position, the index of its value in the cores' streams laid end to end
    (each as long as its order), or past them (a zero) for a position no stream fills; where
    several values land on one position, the last core's last one."""
    orders = [order.of_core(core) for core in range(order.cores)]
    source = np.full(order.ofm_depth * order.kernel_h * order.kernel_w * order.ifm_depth, sum(map(len, orders)))
    offset = 0
    for core_order in orders:
        used = core_order >= 0
        source[core_order[used]] = offset + np.flatnonzero(used)
        offset += len(core_order)
    return source


def _stream(ctx: Context, core: int) -> bytes:
    regs = ctx.registers
    prefix = WEIGHT_PREFIXES[core]
    length = regs.address(f"{prefix}_LENGTH")
    if not length:
        raise RegisterError(f"{prefix}_LENGTH is 0 but core {core} has weights for this operation")
    return ctx.read_region(
        regs.param("WEIGHT_REGION"), regs.address(f"{prefix}_BASE"), length, f"weight read (core {core})"
    )


def _per_channel(ctx: Context, depth: int, acc48: bool):
    regs = ctx.registers
    raw = ctx.read_region(
        regs.param("SCALE_REGION"),
        regs.address("SCALE_BASE"),
        max(regs.address("SCALE_LENGTH"), depth * u85_weights.SCALE_RECORD_BYTES),
        "scale read",
    )
    return u85_weights.kept_scales(raw, depth, acc48)


class _Finish:
    """The end of a convolution or pooling, prepared (kiln.simulator.npu.prepared) for an
    accumulator of `shape`: a callable (ctx, acc) adding the accumulator input and the bias
    (per-channel scaling: the scale stream's), saturating to the accumulator's bits, scaling
    and storing."""

    def __init__(self, ctx: Context, shape: tuple[int, ...], bits: int, source: int, bound: int | None = None):
        regs = ctx.registers
        self.bits, self.source = bits, source
        self.per_channel = not regs.global_scale()
        # |acc| at most, `bound` where nothing is added to it; within the accumulator's bits the
        # saturation to them changes nothing
        self.bound = bound if source == u85.ACC_INPUT_RESET and not self.per_channel else None
        self.saturates = self.bound is None or self.bound >= 1 << (bits - 1)
        self.scaling = Hits()
        self.scaling.hit("ofm_scaling", "per-channel" if self.per_channel else "global")
        self.scale = None if self.per_channel else regs.ofm_scale()
        self.rounding_step, self.rounding = step(_prepare_rounding, ctx)
        self.store = prepare_store(ctx, shape)

    def __call__(self, ctx: Context, acc: np.ndarray) -> None:
        if self.source == u85.ACC_INPUT_IFM2:
            acc = acc + _acc_from_ifm2(ctx, acc.shape)
        ctx.coverage.hit_all(self.scaling)
        if self.per_channel:
            bias, multiplier, shift = _per_channel(ctx, acc.shape[2], self.bits == 48)
            acc = acc + bias
        else:
            multiplier, shift = self.scale
        if self.saturates:
            acc = clamp(acc, -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1)
        self.rounding_step.enter(ctx.coverage)
        self.store(ctx, rescale(acc, multiplier, shift, self.rounding, self.bound))


def _prepare_rounding(hits, ctx: Context) -> int:
    return output_rounding(hits, ctx.registers)


def prepare_convolution(ctx: Context, param: int):
    """NPU_OP_CONV prepared with the registers of `ctx` (kiln.simulator.npu.prepared): a
    callable run(ctx)."""
    return _Matmul(ctx) if param & 1 else _Mac(ctx, depthwise=False)


def prepare_depthwise(ctx: Context):
    """NPU_OP_DEPTHWISE prepared with the registers of `ctx`: a callable run(ctx)."""
    return _Mac(ctx, depthwise=True)


def _prepare_matmul(hits, ctx: Context):
    """_Matmul's registers: (accumulator bits, input, OFM shape, kernel, IFM window, IFM2 and
    the plan of its read); refuses what is not modelled."""
    regs = ctx.registers
    bits, source = _accumulator(hits, ctx)
    if source != u85.ACC_INPUT_RESET or not regs.global_scale():
        raise NotModelled("NPU_OP_CONV: weights from IFM2 with an accumulator input or per-channel scaling")
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    if (k.width, k.height) != (1, 1):
        raise NotModelled(f"NPU_OP_CONV: weights from IFM2 with a {k.width}x{k.height} kernel are not modelled")
    blockops.record_kernel(hits, k, pad)
    hits.hit("weights", "IFM2")
    _require_memory(ctx, "IFM")
    _require_memory(ctx, "IFM2")
    ifm, ifm2 = regs.feature_map("IFM"), regs.feature_map("IFM2")
    window = blockops.prepare_window(hits, ctx, ifm, range(ifm.depth), k, pad, out_h, out_w)
    plan = ctx.fm_plan(ifm2, range(1), range(depth), range(ifm.depth))
    return bits, source, (out_h, out_w, depth), k, window, ifm2, plan


class _Matmul:
    """NPU_OP_CONV with weights_ifm2 (Vela's MATMUL) prepared: a 1x1 convolution whose weights
    are IFM2, one row of OFM-depth columns of IFM-depth channels (weight [o, i] at IFM2 column
    o, channel i, zero point subtracted), globally scaled, no bias."""

    def __init__(self, ctx: Context):
        self.start, started = step(_prepare_matmul, ctx)
        if started is not None:
            bits, source, self.shape, self.k, self.window, self.ifm2, self.plan = started
            self.finish = _Finish(ctx, self.shape, bits, source)

    def __call__(self, ctx: Context) -> None:
        self.start.enter(ctx.coverage)
        x, _ = blockops.read_window(ctx, self.window)
        ifm2 = self.ifm2
        w = ctx.read_planned(ifm2, self.plan, "IFM2 read", np.int64)
        w = (w[0] - ifm2.zero_point)[:, None, None, :]
        out_h, out_w, _ = self.shape
        self.finish(ctx, blockops.convolution_sums(x, blockops.tap_matrices(w), self.k, out_h, out_w))


def _prepare_mac(hits, ctx: Context, depthwise: bool):
    """_Mac's registers: (accumulator bits, input, OFM shape, kernel, IFM window); refuses what
    is not modelled."""
    regs = ctx.registers
    bits, source = _accumulator(hits, ctx)
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    blockops.record_kernel(hits, k, pad)
    ifm = regs.feature_map("IFM")
    _require_memory(ctx, "IFM")
    if not depthwise:
        hits.hit("kernel", "part-kernel-first" if k.part_kernel_first else "depth-first")
    channels = range(depth) if depthwise else range(ifm.depth)
    window = blockops.prepare_window(hits, ctx, ifm, channels, k, pad, out_h, out_w)
    return bits, source, (out_h, out_w, depth), k, window, ifm.depth


class _Mac:
    """NPU_OP_CONV (weights from the weight streams) or NPU_OP_DEPTHWISE prepared."""

    def __init__(self, ctx: Context, depthwise: bool):
        self.depthwise = depthwise
        self.start, started = step(_prepare_mac, ctx, depthwise)
        if started is None:
            return
        bits, source, self.shape, self.k, self.window, ifm_depth = started
        depth = self.shape[2]
        shape = (depth, self.k.height, self.k.width, 1 if depthwise else ifm_depth)
        self.weights_step, self.weights = step(_prepare_weights, ctx, shape, depthwise)
        self.finish = _Finish(ctx, self.shape, bits, source)

    def __call__(self, ctx: Context) -> None:
        self.start.enter(ctx.coverage)
        x, _ = blockops.read_window(ctx, self.window)
        self.weights_step.enter(ctx.coverage)
        w = _read_weights(ctx, self.weights)
        out_h, out_w, _ = self.shape
        sums = blockops.depthwise_sums if self.depthwise else blockops.convolution_sums
        self.finish(ctx, sums(x, w, self.k, out_h, out_w))


def prepare_pooling(ctx: Context, mode: int) -> _Pooling:
    """NPU_OP_POOL of `mode` prepared with the registers of `ctx` (kiln.simulator.npu.prepared):
    a callable run(ctx)."""
    return _Pooling(ctx, mode)


def _prepare_pool_start(hits, ctx: Context, mode: int) -> tuple[str, int, int]:
    """(the mode's name, accumulator bits, accumulator input); refuses a reserved mode and what
    is not modelled."""
    name = POOL_NAMES.get(mode)
    if name is None:
        raise RegisterError(f"NPU_OP_POOL: reserved pooling mode {mode}")
    bits, source = _accumulator(hits, ctx)
    if name != "NONE":
        _require_memory(ctx, "IFM")
    return name, bits, source


class _Pooling:
    """One NPU_OP_POOL prepared: SUM, AVERAGE, REDUCE_SUM, MAX and MIN with their window and
    output stage worked out; ARGMAX_X/Y and NONE work theirs out when they run."""

    def __init__(self, ctx: Context, mode: int):
        self.start, started = step(_prepare_pool_start, ctx, mode)
        if started is None:
            return
        self.name, bits, source = started
        pools = self.name != "NONE" and not self.name.startswith("ARGMAX")
        self.pool_step, self.pool = step(blockops.prepare_pool, ctx, self.name) if pools else (None, None)
        self.shape = ctx.registers.ofm_shape()
        self.finish = _Finish(ctx, self.shape, bits, source, self.pool.bound if self.pool is not None else None)

    def __call__(self, ctx: Context) -> None:
        self.start.enter(ctx.coverage)
        name = self.name
        if self.pool_step is not None:
            self.pool_step.enter(ctx.coverage)
            acc = blockops.pooled(ctx, self.pool, average_divides=True)
        elif name == "NONE":
            ctx.coverage.hit("pooling", name)
            acc = np.zeros(self.shape, np.int64)
        else:
            acc = _argmax(ctx, name)
        self.finish(ctx, acc)


def _require_memory(ctx: Context, prefix: str) -> None:
    storage = ctx.registers.storage(prefix)
    if storage != u85.STORAGE_TILE2X2:
        raise NotModelled(
            f"{prefix}_PRECISION: a {u85.STORAGE_NAMES[storage]} {prefix} is not modelled for this operation"
        )


ARGMAX_INDEX_SHIFT = 16


def _argmax(ctx: Context, name: str) -> np.ndarray:
    """ARGMAX_X / ARGMAX_Y: the position (0-based, the first of equal maxima) of each window's
    largest real sample along the kernel's width or height, times 2^16 in the accumulator
    (Vela's OFM scale, a shift of 16 toward minus infinity, takes it out; what the hardware
    keeps in the low 16 bits is not modelled, so any other OFM scale is refused)."""
    regs = ctx.registers
    if regs.ofm_scale() != (1, ARGMAX_INDEX_SHIFT) or not regs.global_scale():
        raise NotModelled(f"NPU_OP_POOL: {name} with OFM scale {regs.ofm_scale()} is not modelled")
    ctx.coverage.hit("pooling", name)
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    if (k.height if name == "ARGMAX_X" else k.width) != 1:
        raise NotModelled(f"NPU_OP_POOL: {name} over a {k.width}x{k.height} kernel is not modelled")
    x, valid = blockops.padded_ifm(ctx, regs.feature_map("IFM"), range(depth), k, pad, out_h, out_w)
    low = np.iinfo(np.int64).min
    x = np.where(valid[:, :, None], x, low)
    if k.height * k.width > blockops.MANY_TAPS:  # argmax: the first of equal maxima, as below
        window = blockops.windows(x, k, out_h, out_w)
        index = (window[..., 0, :] if name == "ARGMAX_X" else window[..., :, 0]).argmax(axis=-1).astype(np.int64)
        return index << ARGMAX_INDEX_SHIFT
    best = np.full((out_h, out_w, depth), low, np.int64)
    index = np.zeros((out_h, out_w, depth), np.int64)
    for ky, kx, view in blockops.taps(x, k, out_h, out_w):
        better = view > best
        best = np.where(better, view, best)
        index = np.where(better, kx if name == "ARGMAX_X" else ky, index)
    return index << ARGMAX_INDEX_SHIFT
