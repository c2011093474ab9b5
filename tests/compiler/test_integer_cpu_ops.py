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
from kiln.spec import CompileSpec, Exclusions
from tests.compiler.helpers import steps_off


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
    "linear": "cortex_m::quantized_linear",
    "linear_1": "cortex_m::quantized_linear",
    "softmax": "cortex_m::softmax",
    "reshape_default": "aten::view_copy",  # flatten, on the NPU where delegation is on
}
EVERY_OP = Exclusions(op_types=("conv2d", "linear", "add", "avg_pool2d", "adaptive_avg_pool2d", "softmax", "pad"))


def _compiled(module, x, spec):
    loaded = LoadedModel("tiny_ops", module.eval(), (x,))
    result = kc.compile_model(loaded, spec, log=lambda line: None)
    reference = quantize(frontend.export(loaded).module(check_guards=False), [(x,)], EthosUQuantizer())
    return result, reference


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
    scale = result.graph.outputs[0].producer.inputs[0].qparams.scale
    for seed in range(4):
        x = torch.randn(1, 3, 9, 9, generator=torch.Generator().manual_seed(seed))
        (out,) = host.run(result.pte, [x.numpy()])
        assert steps_off(out, reference(x), scale).max() <= 1


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
