"""Kernels that move or copy values without arithmetic (max pooling only compares).

Every kernel here copies elements of any dtype (float32, int8, int16, int32, int64, bool)
unless it says otherwise, so the firmware's kernels (firmware/runtime/kernels/view.cpp,
movement.cpp, gather.cpp, cast.cpp, pool_max.cpp) copy bytes and compute the same result
bit for bit. Index arguments follow PyTorch: negative dims count from the end, slice bounds
are clamped, a select/index_select/embedding/checked_index index out of range is an error (HostError here,
kKernelBadArgument on the firmware), never a read, and an index_copy one an error, never a write.

Pads: `pad` lists (before, after) pairs from the last dimension backwards, as PyTorch's
F.pad does; constant pads may be negative (a crop), the copying modes take pads >= 0 within
what each mode allows (reflect: < the size, circular: <= the size).

_to_copy takes its result dtype from the out tensor (run-host passes it, Kernel.out_dtype):
float to an integer type truncates toward zero as PyTorch does; where PyTorch's result is
undefined (NaN, or a value outside the integer type) kiln defines it: NaN gives 0, values
beyond the type saturate to its minimum or maximum; `accepts` refuses constant or quantized
inputs known to reach them. Integers narrow modulo 2**bits (PyTorch's wrap); anything to
bool is `!= 0` (NaN is true); integers to float32 round to nearest even.
"""

from __future__ import annotations

import numpy as np
import torch

from kiln.errors import HostError
from kiln.graph import DTYPES, Value
from kiln.program.kernels.core import Derived, Fixed, Kernel
from kiln.vocabulary import CHECKED_INDEX

aten = torch.ops.aten

MAX_DIMS = 8  # the runtime's kMaxDims
CAST_DTYPES = {np.dtype(d) for d in ("float32", "int8", "int16", "int32", "int64", "bool")}


def _dim(d: int, rank: int) -> int:
    if not -rank <= d < rank:
        raise HostError(f"dimension {d} is out of range for a tensor of rank {rank}")
    return d % rank


def _checked_index(index: np.ndarray, size: int, what: str) -> np.ndarray:
    """`index` (int32/int64) with negative entries left as they are: each must be in [0, size)."""
    index = np.asarray(index)
    bad = (index < 0) | (index >= size)
    if bad.any():
        raise HostError(f"{what}: index {int(index[bad].flat[0])} is out of range 0..{size - 1}")
    return index.astype(np.int64)


# ---- views that copy ----------------------------------------------------------------------


def _slice(x, dim, start, end, step):
    """PyTorch's slice: None bounds are the ends, negative ones count from the end, both are
    clamped to [0, size] (Python's slice semantics for step >= 1)."""
    if step < 1:
        raise HostError(f"slice step {step} is not positive")
    index = [slice(None)] * x.ndim
    index[_dim(dim, x.ndim)] = slice(start, end, step)
    return np.ascontiguousarray(x[tuple(index)])


def _select(x, dim, index):
    dim = _dim(dim, x.ndim)
    size = x.shape[dim]
    if not -size <= index < size:
        raise HostError(f"select: index {index} is out of range for size {size}")
    return np.ascontiguousarray(np.take(x, index % size, axis=dim))


def _permute(x, dims):
    dims = [_dim(d, x.ndim) for d in dims]
    if sorted(dims) != list(range(x.ndim)):
        raise HostError(f"permute: {dims} is not a permutation of {x.ndim} dims")
    return np.ascontiguousarray(np.transpose(x, dims))


def _transpose_dims(op) -> list[int]:
    rank = len(op.inputs[0].shape)
    dims = list(range(rank))
    d0, d1 = op.arg("dim0") % rank, op.arg("dim1") % rank
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return dims


def _expand(x, size, implicit):
    """New leading dims; -1 keeps a dim; a dim of size 1 repeats to any size."""
    lead = len(size) - x.ndim
    if lead < 0:
        raise HostError(f"expand: {list(size)} has fewer dims than the input's {x.ndim}")
    shape = [s if d < lead or s != -1 else x.shape[d - lead] for d, s in enumerate(size)]
    return np.ascontiguousarray(np.broadcast_to(x, shape))


def _flip(x, dims):
    dims = [_dim(d, x.ndim) for d in dims]
    if len(set(dims)) != len(dims):
        raise HostError(f"flip: a dim appears twice in {dims}")
    return np.ascontiguousarray(np.flip(x, axis=tuple(dims))) if dims else x.copy()


def _cat(tensors, dim):
    return np.concatenate(tensors, axis=_dim(dim, tensors[0].ndim))


# ---- padding --------------------------------------------------------------------------------


def _pad_index(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """The input index feeding each output position along one dim; -1 where a constant goes."""
    c = np.arange(-before, size + after)
    if mode == "constant":
        return np.where((c >= 0) & (c < size), c, -1)
    if mode == "reflect":
        c = np.abs(c)
        return np.where(c >= size, 2 * (size - 1) - c, c)
    if mode == "replicate":
        return np.clip(c, 0, size - 1)
    return c % size  # circular


def _check_pads(shape, pads, mode: str):
    if len(pads) % 2 or len(pads) > 2 * len(shape):
        raise HostError(f"pad: {len(pads)} pads for a tensor of rank {len(shape)}")
    for i in range(len(pads) // 2):
        size, before, after = shape[-1 - i], pads[2 * i], pads[2 * i + 1]
        if mode == "constant":
            if size + before + after < 0:
                raise HostError(f"pad: {before}, {after} leave a negative size of {size}")
        elif min(before, after) < 0 or size == 0:
            raise HostError(f"{mode} pad: pads {before}, {after} on size {size}")
        elif mode == "reflect" and max(before, after) >= size:
            raise HostError(f"reflect pad: pads {before}, {after} must be below the size {size}")
        elif mode == "circular" and max(before, after) > size:
            raise HostError(f"circular pad: pads {before}, {after} exceed the size {size}")


def _pad(x, pads, mode: str, value=0):
    pads = list(pads)
    _check_pads(x.shape, pads, mode)
    rank = x.ndim
    index = [np.arange(n) for n in x.shape]
    for i in range(len(pads) // 2):
        index[rank - 1 - i] = _pad_index(x.shape[rank - 1 - i], pads[2 * i], pads[2 * i + 1], mode)
    grid = np.ix_(*index) if rank else ()
    out = x[tuple(np.maximum(g, 0) for g in grid)] if x.size else np.zeros([len(i) for i in index], x.dtype)
    if mode == "constant":
        inside = np.ones(out.shape, bool)
        for g in grid:
            inside &= g >= 0
        out = np.where(inside, out, np.array(value).astype(x.dtype))
    return np.ascontiguousarray(out.astype(x.dtype))


def _pads(op) -> list[int]:
    """The pads of aten.pad / constant_pad_nd ("pad") or of a padding op ("padding")."""
    return list(op.arg(op.target._schema.arguments[1].name))


def _pad_mode(op) -> str:
    if op.target is aten.pad.default:
        return op.arg("mode")
    return next((mode for mode, name in PAD_OPS.items() if op.target.name().startswith(name)), "constant")


def _pad_kernel(name: str, mode: str, dims: int | None = None) -> Kernel:
    """The kernel of one padding mode; `dims`: the padded dims its operator fixes (1d/2d/3d).
    Copying modes pad the last len(pad) // 2 dims of a tensor with one or two more (batch,
    channels), as PyTorch's padding ops require."""

    def run(x, pad, *value):
        if mode != "constant" and (dims not in (None, len(pad) // 2) or x.ndim - len(pad) // 2 not in (1, 2)):
            raise HostError(f"{name}: {len(pad)} pads for a tensor of rank {x.ndim}")
        return _pad(x, pad, mode, *value)

    def accepts(op) -> bool:
        pads, shape = _pads(op), op.inputs[0].shape
        try:
            _check_pads(shape, pads, mode)
        except HostError:
            return False
        fits = mode == "constant" or (dims in (None, len(pads) // 2) and len(shape) - len(pads) // 2 in (1, 2))
        return _pad_mode(op) == mode and fits

    value = (Derived(lambda op: 0 if op.arg("value") is None else op.arg("value")),) if mode == "constant" else ()
    return Kernel(name, "out", ("self", Derived(_pads), *value), run, accepts)


# Copying modes: the prefix of their aten ops' names (reflection_pad1d ... 3d).
PAD_OPS = {"reflect": "aten::reflection_pad", "replicate": "aten::replication_pad"}
PAD_KERNELS = {
    "constant": _pad_kernel("aten::constant_pad_nd", "constant"),
    **{
        (mode, dims): _pad_kernel(f"{prefix}{dims}d", mode, dims)
        for mode, prefix in PAD_OPS.items()
        for dims in (1, 2, 3)
    },
    "circular": _pad_kernel("aten::_pad_circular", "circular"),
}


# ---- casts ------------------------------------------------------------------------------------


def _to_copy(x, non_blocking, memory_format, dtype):
    """x converted to `dtype` (the out tensor's) as the module docstring says."""
    dtype = np.dtype(dtype)
    if x.dtype not in CAST_DTYPES or dtype not in CAST_DTYPES:
        raise HostError(f"_to_copy: no conversion from {x.dtype} to {dtype}")
    if dtype == np.bool_:
        return x != 0
    if x.dtype.kind != "f" or dtype.kind == "f":
        return x.astype(dtype)  # integers wrap, to float32 rounds to nearest even
    bits = dtype.itemsize * 8
    high, low = x >= np.float32(2.0 ** (bits - 1)), x < np.float32(-(2.0 ** (bits - 1)))
    out = np.where(np.isnan(x) | high | low, np.float32(0), x).astype(dtype)  # in range: truncates toward zero
    out[high], out[low] = np.iinfo(dtype).max, np.iinfo(dtype).min
    return out


def _real_range(v: Value) -> tuple[float, float] | None:
    """The smallest and largest value `v` can hold, when the compiler knows them."""
    if v.is_constant:
        data = np.asarray(v.data, np.float64)
        return (float("nan"),) * 2 if np.isnan(data).any() else (float(data.min()), float(data.max()))
    if v.qparams is not None and np.ndim(v.qparams.scale) == 0:
        qp = v.qparams
        return (qp.qmin - qp.zero_point) * qp.scale, (qp.qmax - qp.zero_point) * qp.scale
    return None


def _cast_defined(op) -> bool:
    """_to_copy to one of CAST_DTYPES, and no known input where PyTorch's float -> integer
    conversion is undefined (NaN, or beyond the integer type)."""
    x, dtype = op.inputs[0], op.arg("dtype")
    if dtype not in DTYPES or np.dtype(DTYPES[dtype]) not in CAST_DTYPES or np.dtype(x.dtype) not in CAST_DTYPES:
        return False
    out = np.dtype(DTYPES[dtype])
    known = _real_range(x)
    if x.dtype != "float32" or out.kind not in "iu" or known is None:
        return True
    bits = out.itemsize * 8
    low, high = known
    return -(2.0 ** (bits - 1)) <= low and high < 2.0 ** (bits - 1)


# ---- gathers by an index tensor -----------------------------------------------------------------


def _index_select(x, dim, index):
    dim = _dim(dim, x.ndim)
    return np.ascontiguousarray(np.take(x, _checked_index(index, x.shape[dim], "index_select").reshape(-1), axis=dim))


def _checked_index_kernel(index, size):
    """kiln::checked_index: `index` as int32, each entry in [0, size) (else an error)."""
    return _checked_index(index, size, "gather").astype(np.int32)


def _index_copy(x, dim, index, source):
    """x with its entries index[j] along dim replaced by source's j-th (source: x's shape with index's
    length along dim), in index order (a repeated index: the last write stays). Every index must be in
    [0, size), as PyTorch's index_copy checks: one outside is an error, never a write."""
    dim = _dim(dim, x.ndim)
    index = _checked_index(index, x.shape[dim], "index_copy").reshape(-1)
    want = x.shape[:dim] + (index.size,) + x.shape[dim + 1 :]
    if source.shape != want or source.dtype != x.dtype:
        raise HostError(f"index_copy: source {source.dtype}{list(source.shape)} does not fit {x.dtype}{list(want)}")
    out = np.array(x, copy=True)
    for j, row in enumerate(index):
        np.moveaxis(out, dim, 0)[row] = np.moveaxis(source, dim, 0)[j]
    return out


def _embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse):
    """weight's rows for each index (padding_idx and the gradient flags do not change the values)."""
    return np.ascontiguousarray(weight[_checked_index(indices, weight.shape[0], "embedding")])


# ---- max pooling and nearest resizing -----------------------------------------------------------


def pool_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size: floor (or ceil) of the window count, and with ceil_mode
    no window starting in the trailing padding."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode):
    """Max over each window's positions inside the input, in row-major window order: a value
    replaces the running max when greater or NaN (PyTorch's rule: NaN wins, the first of
    equal values stays). Float32 and int8, input (N, )C, H, W."""
    (kh, kw), (ph, pw), (dh, dw) = (_pair(kernel_size), _pair(padding), _pair(dilation))
    sh, sw = _pair(stride) if len(stride) else (kh, kw)
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(ph, pw) < 0 or x.ndim < 2:
        raise HostError(
            f"max_pool2d: kernel {kernel_size}, stride {stride}, padding {padding}, dilation {dilation} "
            f"on a tensor of shape {list(x.shape)}"
        )
    h, w = x.shape[-2:]
    oh = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    if min(oh, ow) < 0:
        raise HostError(f"max_pool2d: a {kh}x{kw} window on a {h}x{w} input gives {oh}x{ow} outputs")
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    acc = np.full(x.shape[:-2] + (oh, ow), lowest, x.dtype)
    rows, cols = np.arange(oh) * sh - ph, np.arange(ow) * sw - pw
    # Window offsets that reach no input for any output leave acc as it is: the loops visit
    # only the others, at most h + (oh - 1) * sh rows and w + (ow - 1) * sw columns (not the
    # kernel size a program may give).
    for i in _reaching(kh, dh, ph, sh, oh, h):
        for j in _reaching(kw, dw, pw, sw, ow, w):
            r, c = rows + i * dh, cols + j * dw
            inside = ((r >= 0) & (r < h))[:, None] & ((c >= 0) & (c < w))[None, :]
            v = x[..., np.clip(r, 0, h - 1)[:, None], np.clip(c, 0, w - 1)[None, :]]
            take = inside & ((v > acc) | np.isnan(v))
            acc = np.where(take, v, acc)
    return acc


def _reaching(kernel: int, dilation: int, pad: int, stride: int, out: int, size: int) -> range:
    """The window offsets i < kernel whose position i * dilation - pad + o * stride lies in
    [0, size) for some output o < out (all arguments positive but pad, which is >= 0)."""
    first = max(0, -(-(pad - (out - 1) * stride) // dilation))
    end = min(kernel, -(-(pad + size) // dilation))
    return range(first, max(first, end))


def _pair(v) -> tuple[int, int]:
    v = list(v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def nearest_index(out_size: int, in_size: int, scale: float | None) -> np.ndarray:
    """PyTorch's nearest source index: the same index when the sizes agree, o >> 1 when the
    output is twice the input, else min(floor(o * s), in - 1) in float32, s = float32(1 /
    scale) for a scale factor, else float32(in) / float32(out)."""
    o = np.arange(out_size)
    if out_size == in_size:
        return o
    if out_size == 2 * in_size:
        return o >> 1
    s = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    return np.minimum(np.floor(o.astype(np.float32) * s).astype(np.int64), in_size - 1)


def _upsample_nearest2d(x, output_size, scale_factors):
    """NCHW; output_size, or the sizes floor(in * scale) (in double) with the scales kept."""
    h, w = x.shape[2:]
    if output_size:
        (oh, ow), (sy, sx) = output_size, (None, None)
    else:
        sy, sx = scale_factors
        oh, ow = int(h * sy), int(w * sx)
    rows, cols = nearest_index(oh, h, sy), nearest_index(ow, w, sx)
    return np.ascontiguousarray(x[:, :, rows[:, None], cols[None, :]])


def _nearest_args(op) -> tuple:
    """(output_size, scale_factors) of upsample_nearest2d.vec or .default (scales_h, scales_w)."""
    if op.target is aten.upsample_nearest2d.vec:
        return op.arg("output_size"), op.arg("scale_factors")
    scales = op.arg("scales_h"), op.arg("scales_w")
    return list(op.arg("output_size")), None if None in scales else list(scales)


def _same_dtype(op) -> bool:
    """Every tensor input of a copying op has the output's dtype (PyTorch would promote)."""
    return all(v.dtype == op.output.dtype for v in op.inputs)


def _with_aliases(table: dict) -> dict:
    """Each kernel also under the graph's *_copy overload where aten has one (slice_copy.Tensor ...)."""
    out = dict(table)
    for target, kernel in table.items():
        packet = getattr(aten, f"{target.overloadpacket.__name__}_copy", None)
        if packet is not None and hasattr(packet, target._overloadname):
            out.setdefault(getattr(packet, target._overloadname), kernel)
    return out


def _view_kernel() -> Kernel:
    return Kernel(
        "aten::view_copy",
        "out",
        ("self", Derived(lambda op: list(op.output.shape))),
        lambda x, size: np.ascontiguousarray(x).reshape(size),
    )


KERNELS: dict[object, Kernel | tuple[Kernel, ...]] = _with_aliases(
    {
        **{
            t: _view_kernel()
            for t in (
                aten.view.default,
                aten.reshape.default,
                aten.flatten.using_ints,
                aten.squeeze.dim,
                aten.squeeze.dims,
                aten.unsqueeze.default,
            )
        },
        aten.slice.Tensor: Kernel(
            "aten::slice_copy",
            "Tensor_out",
            ("self", "dim", "start", "end", "step"),
            _slice,
            lambda op: (op.arg("step") or 1) >= 1,
        ),
        aten.select.int: Kernel("aten::select_copy", "int_out", ("self", "dim", "index"), _select),
        aten.permute.default: Kernel(
            "aten::permute_copy", "out", ("self", "dims"), _permute, lambda op: len(op.output.shape) <= MAX_DIMS
        ),
        aten.transpose.int: Kernel(
            "aten::permute_copy",
            "out",
            ("self", Derived(_transpose_dims)),
            _permute,
            lambda op: len(op.output.shape) <= MAX_DIMS,
        ),
        aten.expand.default: Kernel("aten::expand_copy", "out", ("self", "size", "implicit"), _expand),
        aten.flip.default: Kernel("aten::flip", "out", ("self", "dims"), _flip),
        aten.cat.default: Kernel(
            "aten::cat",
            "out",
            ("tensors", "dim"),
            _cat,
            lambda op: _same_dtype(op) and len({len(v.shape) for v in op.inputs}) == 1,
        ),
        aten.constant_pad_nd.default: PAD_KERNELS["constant"],
        aten.pad.default: tuple(PAD_KERNELS.values()),
        **{getattr(aten, k.name.split("::")[1]).default: k for key, k in PAD_KERNELS.items() if isinstance(key, tuple)},
        aten._to_copy.default: Kernel(
            "aten::_to_copy", "out", ("self", Fixed(False), Fixed(None)), _to_copy, _cast_defined, out_dtype=True
        ),
        CHECKED_INDEX: Kernel(
            "kiln::checked_index",
            "out",
            ("index", "size"),
            _checked_index_kernel,
            lambda op: op.arg("index").dtype in ("int32", "int64") and op.arg("size") < 2**31,
        ),
        aten.embedding.default: Kernel(
            "aten::embedding",
            "out",
            ("weight", "indices", "padding_idx", "scale_grad_by_freq", "sparse"),
            _embedding,
            lambda op: op.arg("indices").dtype in ("int32", "int64"),
        ),
        aten.index_select.default: Kernel(
            "aten::index_select",
            "out",
            ("self", "dim", "index"),
            _index_select,
            lambda op: op.arg("index").dtype in ("int32", "int64"),
        ),
        aten.index_copy.default: Kernel(
            "aten::index_copy",
            "out",
            ("self", "dim", "index", "source"),
            _index_copy,
            lambda op: op.arg("index").dtype in ("int32", "int64") and len(op.arg("index").shape) <= 1,
        ),
        aten.max_pool2d.default: Kernel(
            "aten::max_pool2d",
            "out",
            ("self", "kernel_size", "stride", "padding", "dilation", "ceil_mode"),
            _max_pool2d,
            lambda op: op.output.dtype in ("float32", "int8"),
        ),
        **{
            t: Kernel(
                "aten::upsample_nearest2d",
                "vec_out",
                ("input", Derived(lambda op: _nearest_args(op)[0]), Derived(lambda op: _nearest_args(op)[1])),
                _upsample_nearest2d,
                lambda op: len(op.output.shape) == 4,
            )
            for t in (aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default)
        },
    }
)


# Kernels kiln's compiler never calls but ExecuTorch's Cortex-M flow does: a copy into another
# tensor's dim order (the values in the order of their sizes are the same; the runtime lays
# each tensor out in its own order).
FOREIGN_KERNELS = (
    Kernel(
        "dim_order_ops::_clone_dim_order",
        "out",
        ("self", "non_blocking", "dim_order"),
        lambda x, non_blocking, dim_order: np.array(x),
    ),
)
