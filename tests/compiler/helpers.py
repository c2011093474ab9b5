"""Shared by the compiler's tests (and the simulator's and tests/fvp's that lower a module):
run a module's NPU partition on tosa_reference_model and compare with the PT2E reference
(quantize(PT2E-converted module(x))); small modules and seeded inputs for lowering cases;
distances in output quantization steps; the CLI's error lines."""

from __future__ import annotations

import numpy as np
import torch
import tosa_reference_model
from torch import nn

from kiln import boards, graph
from kiln import compile as kc
from kiln.frontend import export as frontend
from kiln.frontend import normalize
from kiln.frontend.quantizer import EthosUQuantizer, QuantizationScheme, quantize
from kiln.isolation import quiet_native_output
from kiln.lower import tosa as tosa_lowering
from kiln.partition import partitioner as partition
from kiln.reference import run_host as host
from kiln.spec import CompileSpec

qd = torch.ops.quantized_decomposed

_compiled: dict[tuple[str, str], kc.Result | Exception] = {}


def compiled(name: str, target: str) -> kc.Result:
    """The session's compile of `name` for `target`; a failed compile raises its error again."""
    key = (name, target)
    if key not in _compiled:
        try:
            _compiled[key] = kc.compile_model(name, CompileSpec(target), log=lambda line: None)
        except Exception as error:  # kept, so the pair's other test reports it without compiling again
            _compiled[key] = error
    outcome = _compiled[key]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def output_scales(module: torch.fx.GraphModule) -> list[float]:
    """Per output of the PT2E module, the scale of the int8 value its output dequantizes."""
    (output,) = [n for n in module.graph.nodes if n.op == "output"]
    scales = []
    for i, node in enumerate(output.args[0]):
        assert node.target == torch.ops.quantized_decomposed.dequantize_per_tensor.default, (
            f"output {i} of the PT2E reference is {node.target}, not a dequantized int8 value"
        )
        scales.append(float(node.args[1]))
    return scales


QUANTIZES = {qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor, qd.quantize_per_channel.default}
DEQUANTIZES = {qd.dequantize_per_tensor.default, qd.dequantize_per_tensor.tensor, qd.dequantize_per_channel.default}


class Float64Arithmetic(torch.fx.Interpreter):
    """Runs a PT2E module with every float op between its quantize and dequantize nodes in float64:
    the integer values its quantize nodes produce are those of exact arithmetic, not float32's.
    (float32 rounds about one requantization in 10^4 the wrong way: a linear's 61.500007 steps
    computed as 61.499996; a transformer's attention carries one such step to several.)"""

    def call_function(self, target, args, kwargs):
        if target in QUANTIZES:  # it takes float32: within 2^-24 of the float64 value
            args = (args[0].float(), *args[1:])
        else:
            args, kwargs = torch.utils._pytree.tree_map(_widened, (args, kwargs))
        out = super().call_function(target, args, kwargs)
        return out.double() if target in DEQUANTIZES else out


def _widened(value):
    return value.double() if isinstance(value, torch.Tensor) and value.dtype == torch.float32 else value


def run_host_steps_off_pt2e(result: kc.Result) -> list[tuple[np.ndarray, float]]:
    """Per output of a compile: `kiln run-host`'s distance from the PT2E reference (the quantized
    module the compile made, its float arithmetic in float64: Float64Arithmetic) on the compile's
    example inputs, in output steps per element, and the step (the output's scale)."""
    inputs = result.inputs
    with torch.no_grad():
        want = Float64Arithmetic(result.quantized_module).run(*inputs)
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = host.run(result.pte, [x.numpy() for x in inputs])
    assert len(got) == len(want)
    offs = []
    for g, w, scale in zip(got, want, output_scales(result.quantized_module), strict=True):
        assert g.shape == tuple(w.shape) and g.dtype == np.float32
        offs.append((steps_off(g, w, scale), scale))
    return offs


class Lambda(nn.Module):
    """fn(layers, *xs) with the given modules as an nn.ModuleList."""

    def __init__(self, fn, *modules):
        super().__init__()
        self.fn = fn
        self.layers = nn.ModuleList(modules)

    def forward(self, *xs):
        return self.fn(self.layers, *xs)


def seeded(seed, *shapes):
    """One standard normal tensor per shape, from one generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=g) for s in shapes)


def conv(*args, **kwargs):
    """nn.Conv2d(*args, **kwargs) with the weights of torch.manual_seed(0)."""
    torch.manual_seed(0)
    return nn.Conv2d(*args, **kwargs)


def normalised(module: nn.Module, inputs: tuple) -> torch.fx.GraphModule:
    """`module` exported and through kiln's normalisation (kiln.frontend.normalize)."""
    gm = torch.export.export(module.eval(), inputs, strict=False).module(check_guards=False)
    return normalize.normalize(gm)


def call_targets(gm) -> set:
    """The targets of a graph module's call_function nodes."""
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def steps_off(got: np.ndarray, want: torch.Tensor, scale: float) -> np.ndarray:
    """|got - want| in steps of `scale`, rounded to the nearest step, per element."""
    return np.rint(np.abs(got.astype(np.float64) - want.detach().numpy().astype(np.float64)) / scale)


def error_lines(stderr: str) -> list[str]:
    """stderr without argparse's usage block (its "usage:" line and the indented lines after it)."""
    lines, in_usage = [], False
    for line in stderr.splitlines():
        if line.startswith("usage:"):
            in_usage = True
        elif not (in_usage and line.startswith(" ")):
            in_usage = False
            lines.append(line)
    return lines


def quantize_input(x: torch.Tensor, qp: graph.QParams, dtype=torch.int8) -> np.ndarray:
    return qd.quantize_per_tensor.default(x, qp.scale, qp.zero_point, qp.qmin, qp.qmax, dtype).numpy()


def run_tosa(tosa: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with quiet_native_output():
        outputs, status = tosa_reference_model.run(tosa, inputs)
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    return outputs


def partition_feeds(partition, rng: np.random.Generator) -> list[np.ndarray]:
    """Random inputs of an NPU partition: a gather's or scatter's checked int32 indices within the size
    they index (kiln.checked_index's, which refuses others), bools, other integers over their type's
    range."""
    feeds = []
    for v in partition.inputs:
        if v.dtype == "int32":
            feeds.append(rng.integers(0, v.producer.arg("size"), v.shape, dtype=np.int32))
        elif v.dtype == "bool":
            feeds.append(rng.integers(0, 2, v.shape).astype(bool))
        else:
            info = np.iinfo(v.dtype)
            feeds.append(rng.integers(info.min, info.max + 1, v.shape, dtype=v.dtype))
    return feeds


def lower_module(
    module: torch.nn.Module,
    inputs: tuple,
    calibration: list[tuple] | None = None,
    target: str = "ethos-u55-128",
    bits: int = 8,
):
    """(quantized reference module, kiln graph with integer I/O, partitioning) of `module`."""
    loaded = frontend.LoadedModel("case", module.eval(), inputs)
    reference = quantize(
        frontend.export(loaded).module(check_guards=False),
        calibration or [inputs],
        EthosUQuantizer(QuantizationScheme(bits)),
    )
    g = graph.from_pt2e(reference, io_quantized=True)
    return reference, g, partition.partition(g, boards.target(target).npu)


def compare_steps(module: torch.nn.Module, inputs: tuple, calibration=None, target="ethos-u55-128", bits=8):
    """Max difference in quantization steps between the NPU partition on
    tosa_reference_model and the PT2E reference, per output; asserts one partition."""
    reference, g, parts = lower_module(module, inputs, calibration, target, bits)
    cpu = [(p.op.name, p.reason) for p in parts.placements if p.partition is None]
    assert not cpu, f"ops left on the CPU: {cpu}"
    assert len(parts.partitions) == 1
    part = parts.partitions[0]
    tosa = tosa_lowering.lower(part, boards.target(target).npu)
    dtype = getattr(torch, QuantizationScheme(bits).activation_dtype)
    # the partition takes its inputs in order of first use and returns its outputs in order of
    # production, which need not be the model's orders
    feeds = {id(v): quantize_input(x, v.qparams, dtype) for x, v in zip(inputs, g.inputs)}
    produced = dict(zip((id(v) for v in part.outputs), run_tosa(tosa, [feeds[id(v)] for v in part.inputs])))
    outputs = [produced[id(v)] for v in g.outputs]
    expected = reference(*inputs)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    diffs = []
    for got, want, v in zip(outputs, expected, g.outputs):
        qp = v.qparams
        want_q = qd.quantize_per_tensor.default(want, qp.scale, qp.zero_point, qp.qmin, qp.qmax, dtype)
        assert got.shape == tuple(want_q.shape), (got.shape, want_q.shape)
        diffs.append(np.abs(got.astype(np.int32) - want_q.numpy().astype(np.int32)))
    return diffs, tosa
