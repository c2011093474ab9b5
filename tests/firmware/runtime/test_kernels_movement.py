"""Data-movement kernels: each C++ kernel (host build, ASan and UBSan) equals kiln.program.kernels'
numpy bit for bit on the same one-call program (tests/firmware/runtime/helpers.py), and each numpy kernel equals
PyTorch's eager operator exactly on the same arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.errors import HostError
from kiln.program import kernels
from kiln.program.kernels import by_name
from tests.firmware.runtime.helpers import (
    SPECIAL,
    Doubles,
    In,
    Tensors,
    X,
    kernel_names,
    rng_array,
    run_kernel,
    run_tool,
    single_kernel,
)

DTYPES = ("float32", "int8", "int16", "int32", "int64", "bool")


def array(shape, seed, dtype="float32"):
    """Random values of `dtype`: normal floats, integers over most of the type's range, bools."""
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return rng_array(shape, seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), shape, dtype=dtype)


A = {dtype: array((3, 5, 4), 20 + n, dtype) for n, dtype in enumerate(DTYPES)}
CASTS = np.array(
    [
        [0.0, -0.0, 0.99, -0.99, 1.5, -1.5, 127.9, -128.9],
        [127.0, -128.0, 32767.5, -32768.5, 2.0e9, -2.0e9, 1.0e-30, 5.0e10],
    ],
    np.float32,
)
BIG = np.array([2**31 - 1, -(2**31), 2**24 + 1, -(2**53) - 1, 2**62 + 12345, 300, -129, 0], np.int64)
# int8 values with the extremes and repeats, for max pooling
Q = np.random.default_rng(3).integers(-128, 128, (2, 3, 9, 8), dtype=np.int8)
NANS = X.copy()
NANS[0, 0, 1, 1], NANS[1, 2, 4, 0], NANS[0, 3, 0, 0] = np.nan, np.nan, -np.inf

CASES = {
    "view_copy": ("aten::view_copy", "out", [In(X), [2, 168]], (2, 168)),
    # slice: a step, negative and None bounds, bounds clamped past both ends, an empty result
    "slice_step": ("aten::slice_copy", "Tensor_out", [In(X), -1, 1, None, 2], (2, 4, 7, 3)),
    "slice_negative": ("aten::slice_copy", "Tensor_out", [In(X), 2, -5, -1, 1], (2, 4, 4, 6)),
    "slice_clamped": ("aten::slice_copy", "Tensor_out", [In(X), 1, -100, 100, 3], (2, 2, 7, 6)),
    "slice_none": ("aten::slice_copy", "Tensor_out", [In(X), 0, None, None, 1], X.shape),
    "slice_empty": ("aten::slice_copy", "Tensor_out", [In(X), 2, 5, 3, 1], (2, 4, 0, 6)),
    **{f"slice_{d}": ("aten::slice_copy", "Tensor_out", [In(A[d]), 1, 1, None, 3], (3, 2, 4), d) for d in DTYPES},
    "select": ("aten::select_copy", "int_out", [In(X), -2, -3], (2, 4, 6)),
    "select_first_dim": ("aten::select_copy", "int_out", [In(A["int16"]), 0, 2], (5, 4), "int16"),
    "select_to_scalar": ("aten::select_copy", "int_out", [In(np.arange(5, dtype=np.int64)), 0, -1], (), "int64"),
    "permute": ("aten::permute_copy", "out", [In(X), [2, 0, -1, 1]], (7, 2, 6, 4)),
    "permute_8d": (
        "aten::permute_copy",
        "out",
        [In(array((2, 1, 3, 1, 2, 2, 1, 3), 30, "int32")), [7, 6, 5, 4, 3, 2, 1, 0]],
        (3, 1, 2, 2, 1, 3, 1, 2),
        "int32",
    ),
    **{f"permute_{d}": ("aten::permute_copy", "out", [In(A[d]), [1, 2, 0]], (5, 4, 3), d) for d in DTYPES},
    # ExecuTorch's copy into another dim order (contiguous here: test_dim_order holds channels-last)
    "clone_dim_order": ("dim_order_ops::_clone_dim_order", "out", [In(X), False, None], X.shape),
    "clone_dim_order_named": (
        "dim_order_ops::_clone_dim_order",
        "out",
        [In(A["int8"]), False, [0, 1, 2]],
        (3, 5, 4),
        "int8",
    ),
    "expand": ("aten::expand_copy", "out", [In(array((3, 1, 5), 31)), [2, 3, 4, -1], False], (2, 3, 4, 5)),
    "expand_bool": ("aten::expand_copy", "out", [In(A["bool"][:1]), [2, 3, 5, 4], False], (2, 3, 5, 4), "bool"),
    "flip": ("aten::flip", "out", [In(X), [0, -1]], X.shape),
    "flip_int8": ("aten::flip", "out", [In(A["int8"]), [1]], (3, 5, 4), "int8"),
    "flip_none": ("aten::flip", "out", [In(A["int64"]), []], (3, 5, 4), "int64"),
    "cat": (
        "aten::cat",
        "out",
        [Tensors((In(array((2, 3, 4), 32)), In(array((2, 1, 4), 33)), array((2, 5, 4), 34))), -2],
        (2, 9, 4),
    ),
    "cat_first_dim": ("aten::cat", "out", [Tensors((In(A["int64"]), In(A["int64"][:1]))), 0], (4, 5, 4), "int64"),
    **{
        f"cat_{d}": ("aten::cat", "out", [Tensors((In(A[d]), In(A[d][:, :2]), In(A[d][:, :0]))), 1], (3, 7, 4), d)
        for d in DTYPES
    },
    # constant pads, some negative (crops); an integer tensor takes an integral value
    "constant_pad": ("aten::constant_pad_nd", "out", [In(X), [1, 2, -1, 3], 2.5], (2, 4, 9, 9)),
    "constant_pad_all_dims": (
        "aten::constant_pad_nd",
        "out",
        [In(A["int8"]), [0, 1, 2, 0, 1, 1], -3],
        (5, 7, 5),
        "int8",
    ),
    "constant_pad_int64": ("aten::constant_pad_nd", "out", [In(A["int64"]), [2, 0], 7.0], (3, 5, 6), "int64"),
    "reflection_pad1d": ("aten::reflection_pad1d", "out", [In(array((3, 5, 7), 35)), [3, 6]], (3, 5, 16)),
    "reflection_pad1d_unbatched": ("aten::reflection_pad1d", "out", [In(A["int16"][0]), [0, 3]], (5, 7), "int16"),
    "reflection_pad2d": ("aten::reflection_pad2d", "out", [In(X), [2, 5, 6, 1]], (2, 4, 14, 13)),
    "reflection_pad3d": (
        "aten::reflection_pad3d",
        "out",
        [In(array((1, 2, 3, 4, 5), 36)), [1, 2, 3, 0, 2, 1]],
        (1, 2, 6, 7, 8),
    ),
    "replication_pad1d": ("aten::replication_pad1d", "out", [In(A["int32"]), [4, 1]], (3, 5, 9), "int32"),
    "replication_pad2d": ("aten::replication_pad2d", "out", [In(X), [9, 0, 2, 11]], (2, 4, 20, 15)),
    "replication_pad3d": (
        "aten::replication_pad3d",
        "out",
        [In(array((2, 3, 4, 5), 37)), [1, 0, 0, 2, 3, 3]],
        (2, 9, 6, 6),
    ),
    "pad_circular": ("aten::_pad_circular", "out", [In(array((2, 3, 5, 4), 38)), [4, 1, 0, 5]], (2, 3, 10, 9)),
    "pad_circular_bool": ("aten::_pad_circular", "out", [In(A["bool"]), [2, 3]], (3, 5, 9), "bool"),
    # nearest: sizes given (the general rule; twice the input), scale factors (one leaves the
    # size unchanged, where PyTorch copies instead of applying the scale)
    "upsample_nearest": ("aten::upsample_nearest2d", "vec_out", [In(X), [11, 13], None], (2, 4, 11, 13)),
    "upsample_nearest_twice": ("aten::upsample_nearest2d", "vec_out", [In(X), [14, 12], None], (2, 4, 14, 12)),
    "upsample_nearest_down": ("aten::upsample_nearest2d", "vec_out", [In(X), [3, 5], None], (2, 4, 3, 5)),
    "upsample_nearest_scales": (
        "aten::upsample_nearest2d",
        "vec_out",
        [In(X), None, Doubles((2.0, 1.7))],
        (2, 4, 14, 10),
    ),
    "upsample_nearest_same_size": (
        "aten::upsample_nearest2d",
        "vec_out",
        [In(array((1, 2, 3, 5), 39, "int8")), None, Doubles((1.2, 0.5))],
        (1, 2, 3, 2),
        "int8",
    ),
    # casts: truncation toward zero, the edges of each integer type, wrapping, rounding to float
    "to_int8": ("aten::_to_copy", "out", [In(CASTS[:, :4]), False, None], (2, 4), "int8"),
    "to_int16": (
        "aten::_to_copy",
        "out",
        [In(np.array([[1.5, -2.5, 32767.9, -32768.9]], np.float32)), False, None],
        (1, 4),
        "int16",
    ),
    "to_int32": ("aten::_to_copy", "out", [In(CASTS), False, None], (2, 8), "int32"),
    "to_int64": ("aten::_to_copy", "out", [In(CASTS), False, None], (2, 8), "int64"),
    "to_bool": ("aten::_to_copy", "out", [In(SPECIAL), False, None], (2, 4), "bool"),
    "int64_to_float": ("aten::_to_copy", "out", [In(BIG), False, None], (8,), "float32"),
    "int64_to_int8": ("aten::_to_copy", "out", [In(BIG), False, None], (8,), "int8"),
    "int64_to_int32": ("aten::_to_copy", "out", [In(BIG), False, None], (8,), "int32"),
    "int8_to_int64": ("aten::_to_copy", "out", [In(A["int8"]), False, None], (3, 5, 4), "int64"),
    "int16_to_bool": ("aten::_to_copy", "out", [In(A["int16"]), False, None], (3, 5, 4), "bool"),
    "bool_to_float": ("aten::_to_copy", "out", [In(A["bool"]), False, None], (3, 5, 4), "float32"),
    "bool_to_int32": ("aten::_to_copy", "out", [In(A["bool"]), False, None], (3, 5, 4), "int32"),
    "embedding": (
        "aten::embedding",
        "out",
        [array((10, 5), 40), In(np.array([[9, 0, 3], [3, 3, 7]], np.int64)), -1, False, False],
        (2, 3, 5),
    ),
    "embedding_int32": (
        "aten::embedding",
        "out",
        [In(array((6, 3), 41)), In(np.array([5, 1, 0, 1], np.int32)), 2, False, False],
        (4, 3),
    ),
    "index_select": ("aten::index_select", "out", [In(X), -1, np.array([5, 0, 5, 2], np.int64)], (2, 4, 7, 4)),
    "index_select_int32": (
        "aten::index_select",
        "out",
        [In(A["bool"]), 0, In(np.array([2, 0], np.int32))],
        (2, 5, 4),
        "bool",
    ),
    "checked_index": (
        "kiln::checked_index",
        "out",
        [In(np.array([[9, 0, 3], [3, 3, 7]], np.int64)), 10],
        (2, 3),
        "int32",
    ),
    "checked_index_int32": ("kiln::checked_index", "out", [In(np.array([5, 1, 0], np.int32)), 6], (3,), "int32"),
    # index_copy: a KV cache [1, H, T, D] written at one position along T, int8 and int16; along the
    # last dim, the first, and a negative one; an int32 index; bools
    "index_copy_cache_int8": (
        "aten::index_copy",
        "out",
        [In(array((1, 3, 9, 4), 50, "int8")), 2, In(np.array([6], np.int64)), In(array((1, 3, 1, 4), 51, "int8"))],
        (1, 3, 9, 4),
        "int8",
    ),
    "index_copy_cache_int16": (
        "aten::index_copy",
        "out",
        [
            In(array((1, 3, 9, 4), 52, "int16")),
            -2,
            In(np.array([8, 0, 3], np.int64)),
            In(array((1, 3, 3, 4), 53, "int16")),
        ],
        (1, 3, 9, 4),
        "int16",
    ),
    "index_copy_last_dim": (
        "aten::index_copy",
        "out",
        [In(X), 3, In(np.array([5, 0], np.int32)), In(rng_array((2, 4, 7, 2), 54))],
        (2, 4, 7, 6),
    ),
    "index_copy_first_dim_bool": (
        "aten::index_copy",
        "out",
        [In(A["bool"]), 0, In(np.array([1], np.int64)), In(array((1, 5, 4), 55, "bool"))],
        (3, 5, 4),
        "bool",
    ),
    "max_pool2d": ("aten::max_pool2d", "out", [In(X), [3, 3], [2, 2], [1, 1], [1, 1], False], (2, 4, 4, 3)),
    "max_pool2d_ceil_dilated": (
        "aten::max_pool2d",
        "out",
        [In(NANS), [2, 3], [2, 1], [1, 1], [2, 1], True],
        (2, 4, 4, 6),
    ),
    "max_pool2d_default_stride": ("aten::max_pool2d", "out", [In(X[0]), [2, 2], [], [0, 0], [1, 1], True], (4, 4, 3)),
    "max_pool2d_int8": ("aten::max_pool2d", "out", [In(Q), [3, 2], [2, 3], [1, 1], [1, 2], True], (2, 3, 5, 3), "int8"),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


# ---- numpy against PyTorch's eager operators ---------------------------------------------------

TORCH_OPS = {  # each kernel's functional ATen operator (the kernel is its out variant)
    "aten::view_copy": torch.ops.aten.view_copy.default,
    "aten::slice_copy": torch.ops.aten.slice_copy.Tensor,
    "aten::select_copy": torch.ops.aten.select_copy.int,
    "aten::permute_copy": torch.ops.aten.permute_copy.default,
    "aten::expand_copy": torch.ops.aten.expand_copy.default,
    "aten::flip": torch.ops.aten.flip.default,
    "aten::cat": torch.ops.aten.cat.default,
    "aten::constant_pad_nd": torch.ops.aten.constant_pad_nd.default,
    **{
        f"aten::{mode}_pad{d}d": getattr(torch.ops.aten, f"{mode}_pad{d}d").default
        for mode in ("reflection", "replication")
        for d in (1, 2, 3)
    },
    "aten::_pad_circular": torch.ops.aten._pad_circular.default,
    "aten::upsample_nearest2d": torch.ops.aten.upsample_nearest2d.vec,
    "aten::embedding": torch.ops.aten.embedding.default,
    "aten::index_select": torch.ops.aten.index_select.default,
    "aten::index_copy": torch.ops.aten.index_copy.default,
    "aten::max_pool2d": torch.ops.aten.max_pool2d.default,
    # ExecuTorch's copy into a dim order: PyTorch's clone's values (the order is test_dim_order's)
    "dim_order_ops::_clone_dim_order": lambda x, non_blocking, dim_order: torch.clone(x),
    # kiln's own: PyTorch's int32 cast of indices each within [0, size)
    "kiln::checked_index": lambda index, size: torch.ops.aten._to_copy.default(index, dtype=torch.int32),
}
TORCH_DTYPES = {
    "float32": torch.float32,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}


def _torch_arg(a):
    if isinstance(a, In):
        a = a.array
    if isinstance(a, np.ndarray):
        return torch.from_numpy(a.copy())
    if isinstance(a, Tensors):
        return [_torch_arg(t) for t in a]
    if isinstance(a, Doubles):
        return list(a)
    return a


def _numpy_arg(a):
    if isinstance(a, In):
        return a.array
    if isinstance(a, Tensors):
        return [_numpy_arg(t) for t in a]
    if isinstance(a, Doubles):
        return list(a)
    return a


def _eager(name, args, dtype):
    if name == "aten::_to_copy":
        # defined where PyTorch's float -> integer result is: finite values inside the type
        return torch.ops.aten._to_copy.default(_torch_arg(args[0]), dtype=TORCH_DTYPES[dtype]).numpy()
    if name in ("aten::max_pool2d", "aten::upsample_nearest2d") and dtype == "int8":
        # eager has no int8 max pooling or nearest resizing: in float32, where int8 is exact
        x = _torch_arg(args[0]).float()
        return TORCH_OPS[name](x, *map(_torch_arg, args[1:])).to(torch.int8).numpy()
    if name == "aten::index_copy":  # eager takes int64 indices only; kiln's int32 ones are the same numbers
        x, dim, index, source = map(_torch_arg, args)
        return TORCH_OPS[name](x, dim, index.long(), source).numpy()
    op = TORCH_OPS[name]
    if not hasattr(op, "_schema"):
        return op(*map(_torch_arg, args)).numpy()
    schema = op._schema.arguments
    positional = [a for a in schema if not a.kwarg_only]
    values = list(map(_torch_arg, args))
    kwargs = {a.name: v for a, v in zip(schema[len(positional) :], values[len(positional) :])}
    return op(*values[: len(positional)], **kwargs).numpy()


def _defined_casts(case) -> bool:
    """Cases whose every value has a result PyTorch defines (float -> integer inside the type)."""
    name, _, args, _, *dtype = CASES[case]
    if name != "aten::_to_copy" or args[0].array.dtype != np.float32 or dtype[0] in ("bool", "float32"):
        return True
    x = args[0].array.astype(np.float64)
    bits = np.iinfo(dtype[0]).bits
    return bool(np.all((x > -(2.0 ** (bits - 1)) - 1) & (x < 2.0 ** (bits - 1))))


@pytest.mark.parametrize("case", [c for c in CASES if _defined_casts(c)])
def test_numpy_kernel_equals_pytorch(case):
    name, overload, args, out_shape, *dtype = CASES[case]
    dtype = dtype[0] if dtype else "float32"
    kernel = by_name()[(name, overload)]
    got = kernel.run(*map(_numpy_arg, args), *([np.dtype(dtype)] if kernel.out_dtype else []))
    got = np.asarray(got, dtype).reshape(out_shape)
    expected = _eager(name, args, dtype)
    assert expected.shape == got.shape and expected.dtype == got.dtype
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_undefined_casts_saturate():
    """Where PyTorch's float -> integer conversion is undefined, kiln's is: NaN 0, beyond the type
    its minimum or maximum (worked out by hand)."""
    cast = by_name()[("aten::_to_copy", "out")].run
    x = np.array([np.nan, np.inf, -np.inf, 128.0, -129.0, 3.0e9, -3.0e9, 1.0e19, -1.0e19], np.float32)
    assert cast(x, False, None, np.dtype("int8")).tolist() == [0, 127, -128, 127, -128, 127, -128, 127, -128]
    assert cast(x, False, None, np.dtype("int32")).tolist() == [
        0,
        2**31 - 1,
        -(2**31),
        128,
        -129,
        2**31 - 1,
        -(2**31),
        2**31 - 1,
        -(2**31),
    ]
    assert cast(x, False, None, np.dtype("int64")).tolist() == [
        0,
        2**63 - 1,
        -(2**63),
        128,
        -129,
        3_000_000_000,
        -3_000_000_000,
        2**63 - 1,
        -(2**63),
    ]


@pytest.mark.parametrize(
    "name, args, out_shape, position, bad",
    [
        ("aten::embedding", [array((4, 3), 42), In(np.array([0, 4], np.int64)), -1, False, False], (2, 3), 1, 4),
        ("aten::embedding", [array((4, 3), 42), In(np.array([-1], np.int32)), -1, False, False], (1, 3), 1, 2**32 - 1),
        ("aten::index_select", [In(X), 1, In(np.array([1, 4], np.int64))], (2, 2, 7, 6), 2, 4),
        ("kiln::checked_index", [In(np.array([2, 7, 1], np.int64)), 7], ((3,), np.int32), 0, 7),
        (
            "aten::index_copy",
            [In(X), 2, In(np.array([3, 7], np.int64)), In(rng_array((2, 4, 2, 6), 56))],
            X.shape,
            2,
            7,
        ),
        ("aten::index_copy", [In(X), 0, In(np.array([-1], np.int64)), In(X[:1])], X.shape, 2, 2**32 - 1),
        ("kiln::checked_index", [In(np.array([-2], np.int32)), 7], ((1,), np.int32), 0, 2**32 - 2),
    ],
)
def test_index_out_of_range_is_an_error(runtime_host, tmp_path, name, args, out_shape, position, bad):
    """An index outside the table: the firmware's kernel fails (bad argument, the index's position
    and value), numpy raises; neither reads (nor, index_copy, writes) outside the tensor."""
    shape, dtype = out_shape if isinstance(out_shape[0], tuple) else (out_shape, np.float32)
    data, arrays = single_kernel(name, "out", args, shape, dtype)
    (tmp_path / "k.pte").write_bytes(data)
    paths = []
    for n, a in enumerate(arrays):
        paths.append(tmp_path / f"in{n}.bin")
        a.tofile(paths[-1])
    done = run_tool(runtime_host, "run", tmp_path / "k.pte", tmp_path, *paths)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.strip() == f"error 0x300 kernel: bad argument (a={position}, b={bad})"
    with pytest.raises(HostError, match="out of range"):
        by_name()[(name, "out")].run(*map(_numpy_arg, args))


# ---- which kernel a graph op gets ----------------------------------------------------------------


def _op(target, x, out_shape, out_dtype="float32", *args, **kwargs):
    from kiln.graph import Op, Value

    return Op("node", target, (x, *args), kwargs, [Value("out", out_shape, out_dtype)])


@pytest.mark.parametrize(
    "shape, mode, pads, kernel",
    [
        ((1, 2, 4, 4), "constant", [1, 1], "aten::constant_pad_nd"),
        ((2, 4, 4), "reflect", [1, 2], "aten::reflection_pad1d"),
        ((1, 2, 4, 4), "reflect", [1, 2], None),  # 1-D padding takes 2-D or 3-D input, as PyTorch's
        ((1, 2, 4, 4), "reflect", [1, 2, 0, 1], "aten::reflection_pad2d"),
        ((1, 2, 4, 4), "replicate", [1, 1, 1, 1, 1, 1], "aten::replication_pad3d"),
        ((1, 2, 4, 4), "circular", [3, 0, 2, 2], "aten::_pad_circular"),
        ((2, 4, 4), "reflect", [4, 0], None),  # a reflect pad must be below the size (4)
        ((2, 4, 4), "circular", [5, 0], None),  # a circular pad at most the size
    ],
)
def test_pad_by_mode_picks_its_kernel(shape, mode, pads, kernel):
    from kiln.graph import Value
    from kiln.program.kernels import kernel_for

    x = Value("x", shape, "float32")
    op = _op(torch.ops.aten.pad.default, x, shape, "float32", pads, mode)
    found = kernel_for(op)
    assert (found and found.name) == kernel


@pytest.mark.parametrize(
    "x_kwargs, dtype, accepted",
    [
        ({}, torch.int32, True),  # a float of unknown range: kiln's saturation applies
        ({"qparams": "int8 range / 100"}, torch.int8, True),  # reals in [-1.28, 1.27]
        ({"qparams": "int8 range * 2"}, torch.int8, False),  # reals up to 254: beyond int8
        ({"data": np.array([1.0, np.nan], np.float32)}, torch.int64, False),
        ({"data": np.array([1.0e10], np.float32)}, torch.int32, False),
        ({"data": np.array([1.0e10], np.float32)}, torch.int64, True),
        ({"data": np.array([np.nan], np.float32)}, torch.bool, True),  # bool is defined for NaN
    ],
)
def test_cast_refuses_inputs_known_to_reach_undefined_conversions(x_kwargs, dtype, accepted):
    from kiln.graph import QParams, Value
    from kiln.program.kernels import kernel_for

    scales = {"int8 range / 100": 0.01, "int8 range * 2": 2.0}
    kwargs = dict(x_kwargs)
    if "qparams" in kwargs:
        kwargs["qparams"] = QParams(scales[kwargs["qparams"]])
    shape = kwargs["data"].shape if "data" in kwargs else (3,)
    x = Value("x", shape, "float32", **kwargs)
    op = _op(torch.ops.aten._to_copy.default, x, shape, str(dtype).split(".")[1], dtype=dtype)
    assert (kernel_for(op) is not None) == accepted


def test_every_movement_kernel_has_a_case():
    """Each kernel of kiln.program.kernels.movement is a case here (test_runtime_host checks that
    every family has its test_kernels_<family>.py and the host build has every kernel)."""
    assert {(case[0], case[1]) for case in CASES.values()} == kernel_names(kernels.movement)
