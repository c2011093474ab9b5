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
from kiln.simulator.npu.arithmetic import clamp
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.memo import keeps
from kiln.simulator.npu.output import scale_values
from kiln.simulator.npu.u85 import registers as u85
from kiln.simulator.npu.u85 import weights as u85_weights
from kiln.simulator.npu.u85.output import store
from kiln.simulator.npu.u85.weights import ORDER_BYTES
from kiln.simulator.npu.weights import decode_stream, kept

POOL_NAMES = {0: "MAX", 1: "AVERAGE", 2: "REDUCE_SUM", 3: "SUM", 4: "NONE", 5: "MIN", 6: "ARGMAX_X", 7: "ARGMAX_Y"}
WEIGHT_PREFIXES = ("WEIGHT", "WEIGHT1", "WEIGHT2", "WEIGHT3")
_ACC_BITS = {u85.ACC_I32: 32, u85.ACC_I48: 48}


def _accumulator(ctx: Context) -> tuple[int, int]:
    """(accumulator bits, accumulator input); refuses what is not modelled."""
    acc, source, output, _ = ctx.registers.acc_format()
    ctx.coverage.hit("accumulator", f"{_ACC_BITS[acc]}-bit")
    ctx.coverage.hit("acc_input", u85.ACC_INPUT_NAMES[source])
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


def _weights(ctx: Context, shape: tuple[int, int, int, int], depthwise: bool) -> np.ndarray:
    """The weights of this operation, gathered from every core's stream (or, in the fast
    weight format, from the one stream interleaving them): a depthwise convolution's OHWI,
    int64; a convolution's as blockops.tap_matrices. Kept (kiln.simulator.npu.weights.kept)
    by the registers that order them and the bytes of the streams read."""
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
    ctx.coverage.hit("cores", str(config.cores))
    ctx.coverage.hit("weights", ("FWD" if fast else "SWD") + (" 2:4 sparse" if sparsity else ""))
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
    if fast:
        if depthwise:
            raise RegisterError("WEIGHT_FORMAT: a depthwise convolution has no fast-format weights")
        raws = (_stream(ctx, 0),)
    else:
        raws = _core_streams(ctx, order)

    def ohwi() -> np.ndarray:
        weights = _gathered(order, bool(fast), raws).reshape(shape)
        return weights if depthwise else blockops.tap_matrices(weights)

    return kept(("U85", order, bool(fast), *raws), ohwi)


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
    return u85_weights.decode_scales(raw, depth, acc48)


def _finish(ctx: Context, acc: np.ndarray, bits: int, source: int) -> None:
    """Accumulator input, bias (per-channel scaling: the scale stream's), saturation to the
    accumulator's bits, scaling and store."""
    regs = ctx.registers
    depth = acc.shape[2]
    if source == u85.ACC_INPUT_IFM2:
        acc = acc + _acc_from_ifm2(ctx, acc.shape)
    if regs.global_scale():
        ctx.coverage.hit("ofm_scaling", "global")
        multiplier, shift = regs.ofm_scale()
    else:
        ctx.coverage.hit("ofm_scaling", "per-channel")
        bias, multiplier, shift = _per_channel(ctx, depth, bits == 48)
        acc = acc + bias
    acc = clamp(acc, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    store(ctx, scale_values(ctx, acc, multiplier, shift))


def convolution(ctx: Context, param: int) -> None:
    if param & 1:
        _ifm2_weights(ctx)
    else:
        _mac(ctx, depthwise=False)


def _ifm2_weights(ctx: Context) -> None:
    """NPU_OP_CONV with weights_ifm2 (Vela's MATMUL): a 1x1 convolution whose weights are
    IFM2, one row of OFM-depth columns of IFM-depth channels (weight [o, i] at IFM2 column o,
    channel i, zero point subtracted), globally scaled, no bias."""
    regs = ctx.registers
    bits, source = _accumulator(ctx)
    if source != u85.ACC_INPUT_RESET or not regs.global_scale():
        raise NotModelled("NPU_OP_CONV: weights from IFM2 with an accumulator input or per-channel scaling")
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    if (k.width, k.height) != (1, 1):
        raise NotModelled(f"NPU_OP_CONV: weights from IFM2 with a {k.width}x{k.height} kernel are not modelled")
    blockops.record_kernel(ctx, k, pad)
    ctx.coverage.hit("weights", "IFM2")
    _require_memory(ctx, "IFM")
    _require_memory(ctx, "IFM2")
    ifm, ifm2 = regs.feature_map("IFM"), regs.feature_map("IFM2")
    x, _ = blockops.padded_ifm(ctx, ifm, range(ifm.depth), k, pad, out_h, out_w)
    w = ctx.read_fm(ifm2, range(1), range(depth), range(ifm.depth), "IFM2 read").astype(np.int64)
    w = (w[0] - ifm2.zero_point)[:, None, None, :]
    _finish(ctx, blockops.convolution_sums(x, blockops.tap_matrices(w), k, out_h, out_w), bits, source)


def depthwise(ctx: Context) -> None:
    _mac(ctx, depthwise=True)


def _mac(ctx: Context, depthwise: bool) -> None:
    regs = ctx.registers
    bits, source = _accumulator(ctx)
    out_h, out_w, depth = regs.ofm_shape()
    k, pad = regs.kernel(), regs.padding()
    blockops.record_kernel(ctx, k, pad)
    ifm = regs.feature_map("IFM")
    _require_memory(ctx, "IFM")
    if depthwise:
        x, _ = blockops.padded_ifm(ctx, ifm, range(depth), k, pad, out_h, out_w)
        w = _weights(ctx, (depth, k.height, k.width, 1), True)
        acc = blockops.depthwise_sums(x, w, k, out_h, out_w)
    else:
        ctx.coverage.hit("kernel", "part-kernel-first" if k.part_kernel_first else "depth-first")
        x, _ = blockops.padded_ifm(ctx, ifm, range(ifm.depth), k, pad, out_h, out_w)
        w = _weights(ctx, (depth, k.height, k.width, ifm.depth), False)
        acc = blockops.convolution_sums(x, w, k, out_h, out_w)
    _finish(ctx, acc, bits, source)


def pooling(ctx: Context, mode: int) -> None:
    name = POOL_NAMES.get(mode)
    if name is None:
        raise RegisterError(f"NPU_OP_POOL: reserved pooling mode {mode}")
    bits, source = _accumulator(ctx)
    if name.startswith("ARGMAX"):
        _require_memory(ctx, "IFM")
        acc = _argmax(ctx, name)
    elif name == "NONE":
        ctx.coverage.hit("pooling", name)
        acc = np.zeros(ctx.registers.ofm_shape(), np.int64)
    else:
        _require_memory(ctx, "IFM")
        acc = blockops.pool_values(ctx, name, average_divides=True)
    _finish(ctx, acc, bits, source)


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
