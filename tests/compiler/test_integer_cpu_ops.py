"""Quantized ops kept on the CPU run as integer cortex_m kernels where one takes their arguments
(kiln.program.integer_ops), in float between a dequantize and a quantize where none does, and
the report says which: checked on a model of the MLPerf Tiny models' CPU ops (convolution,
depthwise convolution, add, pad, average and global average pooling, linear, softmax) kept
off the NPU by exclusion and by --no-delegate, whose `kiln run-host` output is within one step
of the PT2E reference, and on ops the integer kernels do not take."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln import compile as kc
from kiln.frontend import export as frontend
from kiln.frontend.export import LoadedModel
from kiln.frontend.quantizer import EthosUQuantizer, quantize
from kiln.reference import run_host as host
from kiln.spec import CompileSpec, Exclusions, Int16Regions
from tests.compiler.helpers import steps_off
from tests.compiler.random_models import steps_off_pt2e
from tests.compiler.test_precision import block


class TinyOps(torch.nn.Module):
    """conv + relu, depthwise conv, residual add, pad, avg pool, global avg pool, two linear layers
    (45 features: two Helium vectors and a tail of 13), softmax."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 20, 3, padding=1)
        self.dw = torch.nn.Conv2d(20, 20, 3, padding=1, groups=20)
        self.fc1 = torch.nn.Linear(20, 45)
        self.fc2 = torch.nn.Linear(45, 11)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = y + self.dw(y)
        y = torch.nn.functional.pad(y, (1, 0, 2, 1))
        y = torch.nn.functional.avg_pool2d(y, 2)
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return torch.softmax(self.fc2(torch.relu(self.fc1(y))), -1)


INTEGER = {
    "conv2d": "cortex_m::quantized_conv2d",
    "conv2d_1": "cortex_m::quantized_depthwise_conv2d",
    "add": "cortex_m::quantized_add",
    "pad": "cortex_m::pad",
    "avg_pool2d": "cortex_m::quantized_avg_pool2d",
    "adaptive_avg_pool2d": "cortex_m::quantized_avg_pool2d",
    "linear": "cortex_m::quantized_linear_per_channel",  # per-channel weights: kiln's tensor form
    "linear_1": "cortex_m::quantized_linear_per_channel",
    "softmax": "cortex_m::softmax",
    "reshape_default": "aten::view_copy",  # flatten, on the NPU where delegation is on
}
EVERY_OP = Exclusions(op_types=("conv2d", "linear", "add", "avg_pool2d", "adaptive_avg_pool2d", "softmax", "pad"))


def _compiled(module, x, spec):
    loaded = LoadedModel("tiny_ops", module.eval(), (x,))
    result = kc.compile_model(loaded, spec, log=lambda line: None)
    reference = quantize(frontend.export(loaded).module(check_guards=False), [(x,)], EthosUQuantizer())
    return result, reference


def assert_within_one_step(result, reference, shape, seeds):
    """run-host's output of the compiled one-input model within one step of the PT2E reference on
    `seeds` random inputs of `shape`."""
    scale = result.graph.outputs[0].producer.inputs[0].qparams.scale
    for seed in range(seeds):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        (out,) = host.run(result.pte, [x.numpy()])
        assert steps_off(out, reference(x), scale).max() <= 1


@pytest.mark.parametrize(
    "spec",
    [CompileSpec("ethos-u55-128", exclusions=EVERY_OP), CompileSpec("ethos-u85-256", delegate=False)],
    ids=["excluded", "no_delegate"],
)
def test_quantized_cpu_ops_run_as_integer_kernels_within_one_step(spec):
    torch.manual_seed(1)
    result, reference = _compiled(TinyOps(), torch.randn(1, 3, 9, 9), spec)
    kernels = {o["node"]: (o["arithmetic"], o["kernel"]) for o in result.report["ops"] if "arithmetic" in o}
    integer = {node: ("integer", kernel) for node, kernel in INTEGER.items()}
    assert kernels == {n: k for n, k in integer.items() if spec.delegate is False or n != "reshape_default"}
    assert "; integer kernel cortex_m::quantized_depthwise_conv2d" in kc.format_report(result.report)
    operators = {name for name, _ in result.program.operators}
    assert not operators & {"aten::convolution", "aten::linear", "aten::_softmax", "aten::add"}, operators
    assert_within_one_step(result, reference, (1, 3, 9, 9), seeds=4)


def test_a_per_channel_linear_holds_its_requantization_in_two_constant_tensors():
    """A linear layer of per-channel weights (45 output features) runs as kiln's
    quantized_linear_per_channel, its multipliers and shifts two constant int32 tensors of 45
    items: the one-op int8 program holds 12 values (input, weight, bias, kernel_sum, input,
    filter and output offsets, multipliers, shifts, activation max and min, output), where
    ExecuTorch's IntList form would hold 12 + 2 x 45 (each item its own Int value), and no list."""
    torch.manual_seed(0)
    loaded = LoadedModel("fc", torch.nn.Linear(20, 45).eval(), (torch.randn(1, 20),))
    result = kc.compile_model(loaded, CompileSpec("cortex-m55", io="int8"), log=lambda line: None)
    program = result.program
    assert program.operators == [("cortex_m::quantized_linear_per_channel", "out")]
    assert len(program.values) == 12
    assert not [v for v in program.values if v.kind == "int_list"]
    tables = [
        v.value for v in program.values if v.kind == "tensor" and v.value.name.endswith(("multipliers", "shifts"))
    ]
    assert [(t.shape, t.dtype, t.is_constant) for t in tables] == [((45,), "int32", True)] * 2
    assert len(set(zip(*(t.data.tolist() for t in tables)))) > 1  # per channel: not one pair repeated


class FloatOnly(torch.nn.Module):
    """Quantized ops no integer kernel takes: a softmax along dim 1 of three, an add that
    broadcasts, a reflect pad."""

    def forward(self, x):
        y = torch.softmax(x, 1) + x[:, :1]
        return torch.nn.functional.pad(y, (1, 1), mode="reflect")


def test_ops_no_integer_kernel_takes_stay_float_and_the_report_says_why():
    spec = CompileSpec("ethos-u55-128", exclusions=Exclusions(op_types=("softmax", "add", "pad")))
    x = torch.randn(2, 5, 6)
    result, reference = _compiled(FloatOnly(), x, spec)
    kernels = {o["node"]: o for o in result.report["ops"] if "arithmetic" in o}
    assert {node: (o["arithmetic"], o["kernel"]) for node, o in kernels.items()} == {
        "softmax": ("float", "aten::_softmax"),
        "add": ("float", "aten::add"),
        "pad": ("float", "aten::reflection_pad1d"),
    }
    assert kernels["softmax"]["why"] == "it is not along the last dim"
    assert kernels["add"]["why"] == "its operands differ in shape (broadcast) or it has an alpha"
    assert kernels["pad"]["why"] == "its mode is 'reflect', not constant"
    (out,) = host.run(result.pte, [x.numpy()])
    np.testing.assert_array_equal(out, reference(x).detach().numpy())  # the float path is PT2E's, exactly


def test_no_integer_kernels_keeps_every_quantized_cpu_op_in_float():
    """CompileSpec.integer_kernels False (kiln compile --no-integer-kernels): the same model with
    every op on the CPU calls no integer cortex_m kernel and the float kernels instead (between
    a dequantize and a quantize), and stays within one step of PT2E."""
    spec = CompileSpec("ethos-u55-128", exclusions=EVERY_OP, integer_kernels=False)
    torch.manual_seed(1)
    result, reference = _compiled(TinyOps(), torch.randn(1, 3, 9, 9), spec)
    operators = {name for name, _ in result.program.operators}
    assert not operators & set(INTEGER.values()) - {"aten::view_copy"}, operators
    assert {"aten::convolution", "aten::linear", "aten::_softmax", "aten::add"} <= operators, operators
    assert not [o for o in result.report["ops"] if o.get("arithmetic") == "integer"]
    scale = result.graph.outputs[0].producer.inputs[0].qparams.scale
    for seed in range(2):
        x = torch.randn(1, 3, 9, 9, generator=torch.Generator().manual_seed(seed))
        (out,) = host.run(result.pte, [x.numpy()])
        assert steps_off(out, reference(x), scale).max() <= 1


class MoreOps(torch.nn.Module):
    """Transposed convolution, max pool, table activations (sigmoid, tanh, GELU, SiLU,
    hardswish), mul, minimum, maximum, concatenation, transpose and attention's two matrix
    products of activations around a softmax."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.ConvTranspose2d(3, 6, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(self.up(x), 3, 2, 1)
        y = torch.sigmoid(y) * torch.tanh(y)
        y = torch.maximum(torch.nn.functional.gelu(y), torch.minimum(y, torch.nn.functional.silu(y)))
        z = torch.cat([y, torch.nn.functional.hardswish(y)], 1).flatten(2)
        q = z.transpose(1, 2)
        return torch.softmax(q @ z, -1) @ q


MORE_INTEGER = {
    "conv_transpose2d": "cortex_m::quantized_transpose_conv2d",
    "max_pool2d": "cortex_m::quantized_max_pool2d",
    "sigmoid": "cortex_m::quantized_activation",
    "tanh": "cortex_m::quantized_activation",
    "mul": "cortex_m::quantized_mul",
    "gelu": "cortex_m::quantized_activation",
    "silu": "cortex_m::quantized_activation",
    "minimum": "cortex_m::minimum",
    "maximum": "cortex_m::maximum",
    "hardswish": "cortex_m::quantized_activation",
    "cat": "cortex_m::quantized_cat",
    "reshape_default": "aten::view_copy",
    "transpose": "cortex_m::transpose",
    "matmul": "cortex_m::quantized_batch_matmul",
    "softmax": "cortex_m::softmax",
    "matmul_1": "cortex_m::quantized_batch_matmul",
}


def test_more_quantized_cpu_ops_run_as_integer_kernels_within_one_step():
    """On a CPU target every quantized op of MoreOps is an integer kernel (the second operand of
    each matrix product transposed first by cortex_m::transpose), and the program calls no float
    kernel but its edges' quantize and dequantize."""
    x = torch.randn(1, 3, 5, 9)
    result, reference = _compiled(MoreOps(), x, CompileSpec("cortex-m55"))
    kernels = {o["node"]: (o["arithmetic"], o["kernel"]) for o in result.report["ops"] if "arithmetic" in o}
    assert kernels == {node: ("integer", kernel) for node, kernel in MORE_INTEGER.items()}
    operators = {name for name, _ in result.program.operators}
    assert all(name.startswith("cortex_m::") or name == "aten::view_copy" for name in operators), operators
    called = [result.program.operators[i.index][0] for i in result.program.instructions if i.kind == "kernel"]
    assert called.count("cortex_m::transpose") == 3  # the model's, and one before each matrix product
    assert_within_one_step(result, reference, (1, 3, 5, 9), seeds=3)


class Refused(torch.nn.Module):
    """Quantized ops the new integer kernels do not take: a mul with a fused relu, a matrix
    product by a vector, a mul by a number; and a select, an embedding and a where, which move int8
    values as they are."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(10, 5)

    def forward(self, x, m, v, tokens):
        return torch.relu(x * m) @ v[0], x * 3.0, self.table(tokens), torch.where(m > 0, x, m)


def test_ops_the_new_kernels_refuse_stay_float_and_the_report_says_why():
    x, m, v, tokens = torch.randn(2, 3, 5), torch.randn(2, 3, 5), torch.randn(2, 5), torch.tensor([[3, 0, 9, 3]])
    loaded = LoadedModel("refused", Refused().eval(), (x, m, v, tokens))
    result = kc.compile_model(loaded, CompileSpec("cortex-m55"), log=lambda line: None)
    kernels = {o["node"]: o for o in result.report["ops"] if "arithmetic" in o}
    assert {node: (o["arithmetic"], o["kernel"], o.get("why")) for node, o in kernels.items()} == {
        "mul": ("float", "aten::mul", "it has a fused activation, which quantized_mul does not clamp"),
        "select": ("integer", "aten::select_copy", None),
        "embedding": ("integer", "aten::embedding", None),
        "where": ("integer", "aten::where", None),
        "matmul": (
            "float",
            "aten::matmul",
            "its operands are not matrices of the same leading dims (a vector, or batch broadcasting)",
        ),
        "mul_1": (
            "float",
            "aten::mul",
            "its operands or result are not int8 tensors quantized per tensor (or one is a number)",
        ),
    }
    reference = quantize(frontend.export(loaded).module(check_guards=False), [(x, m, v, tokens)], EthosUQuantizer())
    outputs = host.run(result.pte, [x.numpy(), m.numpy(), v.numpy(), tokens.numpy()])
    expected = reference(x, m, v, tokens)
    for out, ref in zip(outputs, expected):
        np.testing.assert_array_equal(out, ref.detach().numpy())  # the float path and the copies are PT2E's, exactly


def test_a_transformer_block_on_the_u55_runs_its_16_bit_attention_products_as_integer_kernels():
    """A pre-norm transformer block (tests/compiler/test_precision.py) with 16-bit attention on
    ethos-u55-128: the NPU takes all but the two matrix products of 16-bit activations (the U55
    has no 16-bit matrix multiply), which run as kiln's s16 batch matmul."""
    spec = CompileSpec("ethos-u55-128", int16=Int16Regions(policies=("attention",)))
    result = kc.compile_model(block(), spec, log=lambda line: None)
    on_cpu = {o["node"]: (o["arithmetic"], o["kernel"]) for o in result.report["ops"] if "arithmetic" in o}
    s16 = ("integer", "cortex_m::quantized_batch_matmul_s16")
    assert on_cpu == {"matmul": s16, "matmul_1": s16}
    called = [result.program.operators[i.index][0] for i in result.program.instructions if i.kind == "kernel"]
    assert called.count("cortex_m::transpose") == 2  # each product's second operand, transposed first
    got = host.run(result.pte, [x.numpy() for x in result.inputs])
    assert steps_off_pt2e(result, result.inputs, got)[0] <= 2  # the U55 program's bound with the float products too


class Residual16(torch.nn.Module):
    """An attention-like residual whose inner module is at 16 bits: a linear layer, a sum of two
    activations and a softmax of it."""

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(37, 37)

        def forward(self, a, b):
            return torch.softmax(self.fc(a) + b, -1)

    def __init__(self):
        super().__init__()
        self.inner = self.Inner()

    def forward(self, x):
        return self.inner(x * 2.0, x.flip(-1))


def test_16_bit_linear_add_and_softmax_on_a_cpu_run_as_s16_kernels():
    """On a CPU target with a module at 16 bits its linear, add and softmax are kiln's s16 kernels, and the
    program follows PT2E's within a few steps of 1/32768 on random inputs: arm_softmax_s16's tables
    interpolate exp and 1 / (1 + x) (two steps), and count a difference below -10 as exp(-10)."""
    torch.manual_seed(0)
    loaded = LoadedModel("residual16", Residual16().eval(), (torch.randn(2, 37),))
    spec = CompileSpec("cortex-m55", int16=Int16Regions(modules=("inner",)))
    result = kc.compile_model(loaded, spec, log=lambda line: None)
    kernels = {o["node"]: (o["arithmetic"], o["kernel"]) for o in result.report["ops"] if "arithmetic" in o}
    assert kernels["linear"] == ("integer", "cortex_m::quantized_linear_s16")
    assert kernels["add"] == ("integer", "cortex_m::quantized_add_s16")
    assert kernels["softmax"] == ("integer", "cortex_m::softmax_s16")
    for seed in range(5):
        x = torch.randn(2, 37, generator=torch.Generator().manual_seed(seed)) * 2
        assert steps_off_pt2e(result, [x], host.run(result.pte, [x.numpy()]))[0] <= 4


class Tables(torch.nn.Module):
    """Unary functions of one int8: each a cortex_m::quantized_activation table."""

    def forward(self, x):
        y = torch.log(x.abs() + 0.5)
        return y, torch.nn.functional.leaky_relu(x, 0.1), torch.exp(x), torch.relu(x), torch.nn.functional.elu(x)


def test_a_table_is_the_float_path_exactly():
    """Each table is the float path (dequantize, the float kernel, quantize) on the 256 int8 values,
    so run-host's outputs equal PT2E's bit for bit, over inputs reaching both ends of the range."""
    x = torch.randn(3, 17)
    result, reference = _compiled(Tables(), x, CompileSpec("cortex-m55"))
    kernels = {o["node"]: o["kernel"] for o in result.report["ops"] if o.get("arithmetic") == "integer"}
    assert {kernels[n] for n in ("abs_1", "log", "leaky_relu", "exp", "relu", "elu")} == {
        "cortex_m::quantized_activation"
    }
    for seed in range(3):
        x = torch.randn(3, 17, generator=torch.Generator().manual_seed(seed)) * 3
        for out, ref in zip(host.run(result.pte, [x.numpy()]), reference(x)):
            np.testing.assert_array_equal(out, ref.detach().numpy())


class S16Ops(torch.nn.Module):
    """A module at 16 bits (convolution with ReLU, depthwise convolution of multiplier 2, max and
    average pools, the product of the two, its spatial mean and its mean over the last dim) and
    an int8 convolution's two means outside it."""

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 10, 3, padding=1)
            self.dw = torch.nn.Conv2d(10, 20, 3, padding=1, groups=10)

        def forward(self, x):
            b = self.dw(torch.relu(self.conv(x)))
            r = torch.nn.functional.max_pool2d(b, 2) * torch.nn.functional.avg_pool2d(b, 2)
            return r.mean(dim=(2, 3), keepdim=True), r.mean(-1), r

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inner = self.Inner()
        self.conv = torch.nn.Conv2d(3, 6, 3)

    def forward(self, x):
        y = self.conv(x)
        return *self.inner(x), y.mean(dim=(2, 3), keepdim=True), y.mean(-1)


S16_INTEGER = {
    "conv2d": "cortex_m::quantized_conv2d",
    "conv2d_1": "cortex_m::quantized_conv2d_s16",
    "conv2d_2": "cortex_m::quantized_depthwise_conv2d_s16",
    "max_pool2d": "cortex_m::quantized_max_pool2d_s16",
    "avg_pool2d": "cortex_m::quantized_avg_pool2d_s16",
    "mul": "cortex_m::quantized_mul_s16",
    "mean": "cortex_m::quantized_mean",
    "mean_1": "cortex_m::quantized_mean",
    "mean_2": "cortex_m::quantized_mean",
    "mean_3": "cortex_m::quantized_mean",
}
S16_SPEC = CompileSpec("cortex-m55", int16=Int16Regions(modules=("inner",)))


def test_16_bit_convolution_pooling_mul_and_means_run_as_integer_kernels_within_one_step():
    """On a CPU target the 16-bit module's convolutions, pools and mul are kiln's s16 kernels,
    every mean (int8 and int16) kiln's quantized_mean, and the program calls no float kernel
    but its edges' quantize and dequantize; run-host's outputs are within one step of PT2E's on
    inputs like the calibration's (each s16 convolution differs from PT2E on about 2 % of its
    outputs, by a step: requantize_s64's 16-bit multiplier; the mul carries a step of either
    operand to about one of its own, and to up to four on inputs twice the calibration's)."""
    loaded = LoadedModel("s16_ops", S16Ops().eval(), (torch.randn(1, 3, 9, 13),))
    result = kc.compile_model(loaded, S16_SPEC, log=lambda line: None)
    kernels = {o["node"]: (o["arithmetic"], o["kernel"]) for o in result.report["ops"] if "arithmetic" in o}
    assert kernels == {node: ("integer", kernel) for node, kernel in S16_INTEGER.items()}
    assert "; integer kernel cortex_m::quantized_mean" in kc.format_report(result.report)
    operators = {name for name, _ in result.program.operators}
    assert all(name.startswith("cortex_m::") for name in operators), operators
    for seed in range(4):
        x = torch.randn(1, 3, 9, 13, generator=torch.Generator().manual_seed(seed))
        assert steps_off_pt2e(result, [x], host.run(result.pte, [x.numpy()]))[0] <= 1
