"""Dim orders in kiln's runtime (host build, ASan and UBSan): the loader binds contiguous and
channels-last tensors (ExecuTorch's Cortex-M flow writes activations channels-last: dim order
0, 2, 3, 1) and either order with its dims of size 1 elsewhere, and refuses every other order.
The integer cortex_m kernels ExecuTorch writes read channels-last activations: each equals
kiln.program.kernels.integer's numpy on the same values in the order of their sizes (the
tensors laid out here by numpy's transpose; tests/compiler/test_cortex_m_kernels.py holds the
numpy against ExecuTorch's Python), and `kiln run-host` gives the same bytes. Kernels that read
only contiguous tensors refuse a channels-last one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln.errors import KilnError
from kiln.program import kernels
from kiln.pte import dim_order
from kiln.reference import run_host as host
from tests.compiler.test_cortex_m_kernels import CASES as OP_CASES
from tests.compiler.test_cortex_m_kernels import (
    activation_case,
    add_case,
    extremum_case,
    mul_case,
    q8,
    transpose_case,
)
from tests.firmware.runtime.helpers import In, run_tool, single_kernel

NHWC = dim_order.CHANNELS_LAST_ORDER
UNSUPPORTED_ORDER = "unsupported feature: a dim order other than contiguous or channels-last"


def laid_out(orders: dict[str, tuple[int, ...]]):
    """A plan_edit giving the plan's inputs (by position: "in0", "in1") and output ("out") these
    dim orders."""

    def edit(fields):
        values = list(fields["values"])
        named = {f"in{k}": i for k, i in enumerate(fields["inputs"])} | {"out": fields["outputs"][0]}
        for key, order in orders.items():
            values[named[key]] = dataclasses.replace(values[named[key]], dim_order=list(order))
        return fields | {"values": values}

    return edit


def run(runtime_host, tmp_path, op, args, out_shape, orders, patch: tuple[bytes, bytes] | None = None):
    """The one-call program of `op` with tensors in `orders`, run by the runtime: (done, program,
    logical input arrays, the output read in its order or None). `patch`: (old, new) bytes of the
    serialized program replaced (an order kiln's writer refuses to write)."""
    data, arrays = single_kernel(op, "out", args, out_shape, np.int8, laid_out(orders))
    if patch is not None:
        assert data.count(patch[0]) == 2  # the input's and the output's dim order
        data = data.replace(*patch)
    (tmp_path / "kernel.pte").write_bytes(data)
    paths = []
    for k, a in enumerate(arrays):
        paths.append(tmp_path / f"in{k}.bin")
        order = orders.get(f"in{k}", range(a.ndim))
        (dim_order.to_memory(a, order) if patch is None else a).tofile(paths[-1])
    done = run_tool(runtime_host, "run", tmp_path / "kernel.pte", tmp_path, *paths)
    if done.returncode != 0:
        return done, data, arrays, None
    flat = np.fromfile(tmp_path / "output_0.bin", np.int8)
    return done, data, arrays, dim_order.from_memory(flat, out_shape, orders.get("out", range(len(out_shape))))


# 4-D cases beside test_cortex_m_kernels' own, for the kernels ExecuTorch's Cortex-M flow hands
# channels-last tensors (tests/fixtures/executorch/ops.py's program): each operand and the out
# tensor in its own order there.
FOUR_D_CASES = {
    "add_4d": add_case((2, 5, 3, 7), 0.05, -4, 0.07, 9, 0.1, 1),
    "mul_4d": mul_case((1, 19, 3, 5), (1, 19, 3, 5), 0.013, 127, 0.5, -128, 0.4, -20),
    "mul_scalar": mul_case((1, 6, 4, 5), (), 0.05, -4, 0.07, 9, 0.02, 1),
    "minimum_4d": extremum_case("minimum", (1, 17, 3, 4), (1, 17, 3, 4), 0.1, -7),
    "maximum_broadcast_4d": extremum_case("maximum", (2, 5, 3, 4), (5, 1, 1), 0.02, 127),
    "sigmoid_4d": activation_case(torch.sigmoid, (1, 6, 5, 7), 0.1, -5, 1 / 256, -128),
    "tanh_4d": activation_case(torch.tanh, (2, 3, 4, 5), 0.03, 20, 1 / 128, 0),
    "hardswish_4d": activation_case(F.hardswish, (1, 9, 2, 3), 3.0e-2, 127, 1.0e-2, -128),
    "permute_to_nhwc": transpose_case((1, 6, 5, 7), (0, 2, 3, 1), 0.1, 0),
}
CASES = OP_CASES | FOUR_D_CASES


def channels_last_case(name: str):
    """Case `name` of test_cortex_m_kernels (or FOUR_D_CASES) with its activations channels-last:
    (op, program arguments, numpy's arguments, output shape, orders). A pad's lists are in the
    input's memory order in the program, as ExecuTorch writes them, and in the order of its dims
    for numpy."""
    case = CASES[name]
    planned = case.planned
    args = [In(a) if i in planned else a for i, a in enumerate(case.args)]
    if case.op == "pad":
        args[1], args[2] = [case.args[1][d] for d in NHWC], [case.args[2][d] for d in NHWC]
    out = kernels.INTEGER_KERNELS[f"cortex_m::{case.op}"].run(*case.args)
    four_d = [k for k, i in enumerate(planned) if np.ndim(case.args[i]) == 4]  # a channels-last tensor is
    orders = {f"in{k}": NHWC for k in four_d} | {"out": NHWC}
    return f"cortex_m::{case.op}", args, case.args, out.shape, orders


FOUR_D = ["conv", "conv_odd_channels", "conv_stride_dilation", "conv_grouped", "depthwise", "depthwise_multiplier"]
FOUR_D += ["add", "avg_pool", "avg_pool_padded_ceil", "avg_pool_global", "pad", "pad_every_dim"]
FOUR_D += ["mul", "max_pool", "max_pool_padded", "max_pool_ceil_dilated", "transpose", "transpose_conv"]
FOUR_D += ["transpose_conv_odd", *FOUR_D_CASES]


@pytest.mark.parametrize("name", FOUR_D)
def test_a_kernel_on_channels_last_tensors_equals_numpy_on_their_values(runtime_host, tmp_path, name):
    op, args, numpy_args, shape, orders = channels_last_case(name)
    done, data, arrays, got = run(runtime_host, tmp_path, op, args, shape, orders)
    assert done.returncode == 0, done.stdout + done.stderr
    want = kernels.INTEGER_KERNELS[op].run(*numpy_args)
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()
    (host_out,) = host.run(data, arrays)
    assert host_out.tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("orders", [{"in0": NHWC}, {"out": NHWC}], ids=["channels_last_in", "channels_last_out"])
def test_a_convolution_reads_and_writes_each_tensor_in_its_own_order(runtime_host, tmp_path, orders):
    op, args, numpy_args, shape, _ = channels_last_case("conv_odd_channels")
    done, _, _, got = run(runtime_host, tmp_path, op, args, shape, orders)
    assert done.returncode == 0, done.stdout + done.stderr
    assert got.tobytes() == np.ascontiguousarray(kernels.INTEGER_KERNELS[op].run(*numpy_args)).tobytes()


def test_quantize_and_dequantize_keep_the_order():
    """Elementwise: run-host's result in the order of the sizes is the contiguous program's."""
    x = np.random.default_rng(3).standard_normal((1, 3, 4, 5)).astype(np.float32)
    args = [In(x), 0.05, 3, -128, 127, 1]
    contiguous, _ = single_kernel("cortex_m::quantize_per_tensor", "out", args, x.shape, np.int8)
    nhwc, _ = single_kernel(
        "cortex_m::quantize_per_tensor", "out", args, x.shape, np.int8, laid_out({"in0": NHWC, "out": NHWC})
    )
    assert host.run(nhwc, [x])[0].tobytes() == host.run(contiguous, [x])[0].tobytes()


WRITTEN = (0, 3, 2, 1)  # the order written where a case's is not a permutation, then patched
VECTOR = bytes([4, 0, 0, 0])  # a FlatBuffer vector's length, 4


@pytest.mark.parametrize(
    "shape, order, binds",
    [
        ((1, 3, 4, 5), NHWC, True),
        ((1, 1, 4, 5), (0, 2, 1, 3), True),  # ExecuTorch's 1x1xHxW input: contiguous bytes
        ((1, 6, 1, 1), (0, 2, 3, 1), True),
        ((2, 3, 1, 5), (0, 2, 3, 1), True),
        ((1, 3, 1, 5), (0, 2, 1, 3), True),  # 0, 1, 3 once H (1) is left out: contiguous
        ((1, 3, 4, 5), (0, 3, 1, 2), False),  # neither
        ((1, 3, 4, 5), (0, 1, 3, 2), False),
        ((3, 4, 5), (0, 2, 1), False),  # channels-last is 4-D
        ((1, 3, 4, 5), (0, 1, 1, 2), False),  # not a permutation
        ((1, 3, 4, 5), (0, 1, 2, 4), False),  # a dim that is not there
    ],
)
def test_the_loader_binds_contiguous_and_channels_last_orders_only(runtime_host, tmp_path, shape, order, binds):
    """A quantize whose input and output are in `order`: bound and run as run-host runs it, or
    refused at load naming the feature (and refused by run-host)."""
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    args = [In(x), 0.1, 0, -128, 127, 1]
    permutation = sorted(order) == list(range(len(shape)))
    written = order if permutation else WRITTEN
    patch = None if permutation else (VECTOR + bytes(WRITTEN), VECTOR + bytes(order))
    orders = {"in0": written, "out": written}
    done, data, arrays, got = run(runtime_host, tmp_path, "cortex_m::quantize_per_tensor", args, shape, orders, patch)
    if binds:
        assert done.returncode == 0, done.stdout + done.stderr
        assert got.tobytes() == host.run(data, arrays)[0].tobytes()
        assert dim_order.layout(shape, order) is not None
        return
    assert done.returncode == 1 and UNSUPPORTED_ORDER in done.stdout, done.stdout + done.stderr
    assert dim_order.layout(shape, order) is None
    with pytest.raises(KilnError):
        host.run(data, arrays)


# Each tensor in its own order, as ExecuTorch's Cortex-M flow writes them (a channels-last
# operand beside a contiguous one, a contiguous result of channels-last operands).
MIXED = [
    ("add_4d", ("in0",)),
    ("add_4d", ("in1", "out")),
    ("mul_4d", ("in1",)),
    ("mul_scalar", ("in0",)),
    ("minimum_4d", ("in0", "in1")),
    ("maximum_broadcast_4d", ("out",)),
    ("sigmoid_4d", ("in0",)),
    ("tanh_4d", ("out",)),
    ("max_pool", ("in0",)),
    ("transpose_conv", ("out",)),
    ("transpose", ("in0",)),
    ("permute_to_nhwc", ("out",)),
]


@pytest.mark.parametrize("name, channels_last", MIXED, ids=[f"{n}-{'+'.join(c)}" for n, c in MIXED])
def test_a_kernel_reads_and_writes_each_tensor_in_its_own_order(runtime_host, tmp_path, name, channels_last):
    """The tensors named channels-last, the others contiguous: the runtime's result equals numpy's
    on the same values, and run-host gives the same bytes."""
    op, args, numpy_args, shape, orders = channels_last_case(name)
    orders = {k: v for k, v in orders.items() if k in channels_last}
    done, data, arrays, got = run(runtime_host, tmp_path, op, args, shape, orders)
    assert done.returncode == 0, done.stdout + done.stderr
    want = np.ascontiguousarray(kernels.INTEGER_KERNELS[op].run(*numpy_args))
    assert got.tobytes() == want.tobytes()
    (host_out,) = host.run(data, arrays)
    assert host_out.tobytes() == want.tobytes()


@pytest.mark.parametrize("into", [NHWC, (0, 1, 2, 3)], ids=["to_channels_last", "to_contiguous"])
def test_a_clone_into_another_dim_order_moves_the_bytes(runtime_host, tmp_path, into):
    """ExecuTorch's dim_order_ops::_clone_dim_order (its flow writes one before a flatten): the
    values stay, their bytes move into the out tensor's order, the one the call names."""
    x = q8((2, 5, 3, 4))
    source = (0, 1, 2, 3) if into == NHWC else NHWC
    orders = {"in0": source, "out": into}
    args = [In(x), False, list(into)]
    done, data, arrays, got = run(runtime_host, tmp_path, "dim_order_ops::_clone_dim_order", args, x.shape, orders)
    assert done.returncode == 0, done.stdout + done.stderr
    assert got.tobytes() == x.tobytes() and host.run(data, arrays)[0].tobytes() == x.tobytes()
    assert (tmp_path / "output_0.bin").read_bytes() == dim_order.to_memory(x, into).tobytes()


def test_a_pad_whose_out_tensor_is_in_another_order_is_refused(runtime_host, tmp_path):
    """A pad's out tensor contiguous beside a channels-last input (its pads are in the input's
    memory order): the kernel refuses the call naming the out tensor."""
    op, args, _, shape, orders = channels_last_case("pad")
    orders = {k: v for k, v in orders.items() if k != "out"}
    done, *_ = run(runtime_host, tmp_path, op, args, shape, orders)
    assert done.returncode == 1, done.stdout
    assert "kernel: unsupported arguments (a=4, b=1024)" in done.stdout, done.stdout


def test_a_softmax_of_a_channels_last_tensor_runs_along_its_channels(runtime_host, tmp_path):
    """ExecuTorch writes cortex_m::softmax of a channels-last tensor along C (dim 1), whose values lie
    next to each other: numpy's along dim 1 on the same values. Along W (dim -1) it is refused, naming
    the dim, rather than misread."""
    x = q8((2, 11, 3, 5))
    args = [In(x), 1, 0, -128, 1 << 30, 20, -248]
    done, data, arrays, got = run(
        runtime_host, tmp_path, "cortex_m::softmax", args, x.shape, {"in0": NHWC, "out": NHWC}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    want = kernels.INTEGER_KERNELS["cortex_m::softmax"].run(x, 1, 0, -128, 1 << 30, 20, -248)
    assert got.tobytes() == want.tobytes() and host.run(data, arrays)[0].tobytes() == want.tobytes()
    args[1] = -1
    done, *_ = run(runtime_host, tmp_path, "cortex_m::softmax", args, x.shape, {"in0": NHWC, "out": NHWC})
    assert done.returncode == 1 and "kernel: unsupported arguments (a=1, b=0)" in done.stdout, done.stdout


def test_kiln_run_host_reads_and_writes_bytes_in_each_tensor_s_order(runtime_host, tmp_path):
    """`kiln run-host` on the files the runtime ran (the input's bytes channels-last) writes the
    bytes the runtime wrote."""
    op, args, _, shape, orders = channels_last_case("depthwise_multiplier")
    done, *_ = run(runtime_host, tmp_path, op, args, shape, orders)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = host.run_files(str(tmp_path / "kernel.pte"), [str(tmp_path / "in0.bin")], str(tmp_path / "host"))
    assert path.read_bytes() == (tmp_path / "output_0.bin").read_bytes()
