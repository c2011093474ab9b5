"""Higher-order operators of an exported graph (kiln/frontend/higher_order.py): grad and autocast
regions, torch.cond, map and scan inlined, equal to eager PyTorch in float and within two
output steps of the PT2E reference through a compiled program; while_loop and submodule calls
refused by name."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn
from torch._higher_order_ops.map import map as map_over
from torch._higher_order_ops.scan import scan

from kiln.errors import ModelError
from tests.compiler.helpers import normalised, seeded


class NoGradRotary(nn.Module):
    """A rotary embedding whose tables come from a @torch.no_grad method (as Llama-family models write it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(16, 16)

    @torch.no_grad()
    def tables(self, x):
        angles = torch.arange(x.shape[1], dtype=torch.float32)[:, None] * torch.arange(8.0)[None, :] * 0.1
        return angles.cos(), angles.sin()

    def forward(self, x):
        cos, sin = self.tables(x)
        y = self.linear(x)
        a, b = y[..., :8], y[..., 8:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


class AutocastOff(nn.Module):
    """Attention scores in an autocast(enabled=False) region (as an efficient-ViT block writes them)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        y = self.linear(x)
        with torch.autocast("cpu", enabled=False):
            scores = (y.float() @ y.float().transpose(-1, -2)).softmax(-1)
        return scores @ y


class EnableGrad(nn.Module):
    def forward(self, x):
        with torch.enable_grad():
            y = x * 2.0
        return y + 1.0


class InputCond(nn.Module):
    # a [1, 1] predicate: a rank-0 one (x.mean() > 0) meets an NPU partition with a rank-0 tensor,
    # whose TOSA graph tosa_reference_model refuses (a lowering limit outside this front-end pass)
    def forward(self, x):
        return torch.cond(x.mean(dim=(0, 1), keepdim=True) > 0, lambda x: x * 2.0, lambda x: x - 1.0, (x,))


class BufferCond(nn.Module):
    def __init__(self, flag: bool):
        super().__init__()
        self.register_buffer("flag", torch.tensor(flag))

    def forward(self, x):
        return torch.cond(self.flag, lambda x: x * 2.0, lambda x: x - 1.0, (x,))


class Map(nn.Module):
    def forward(self, x):
        return map_over(lambda row, w: torch.relu(row * w + 1.0), x, torch.linspace(-1, 1, x.shape[-1]))


class Scan(nn.Module):
    def forward(self, x):
        return scan(lambda carry, row: (carry * 0.5 + row, torch.tanh(carry)), torch.zeros(x.shape[1:]), x)


class WhileLoop(nn.Module):
    def forward(self, x):
        step = torch.tensor(0)
        return torch._higher_order_ops.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2.0), (step, x))[1]


NO_GRAD = lambda: torch.no_grad()  # noqa: E731
CASES = {  # name -> (module, input shape, export context)
    "no_grad_rotary": (NoGradRotary, (1, 6, 16), torch.enable_grad),
    "autocast_off": (AutocastOff, (1, 6, 16), torch.enable_grad),
    "enable_grad_under_no_grad": (EnableGrad, (2, 8), NO_GRAD),
    "cond_on_input": (InputCond, (2, 8), torch.enable_grad),
    "cond_on_true_buffer": (lambda: BufferCond(True), (2, 8), torch.enable_grad),
    "cond_on_false_buffer": (lambda: BufferCond(False), (2, 8), torch.enable_grad),
    "map": (Map, (3, 8), torch.enable_grad),
    "scan": (Scan, (4, 8), torch.enable_grad),
}


def _exported_normalised(module, x, context):
    with context():
        gm = torch.export.export(module.eval(), (x,), strict=False).module(check_guards=False)
    higher = [n for n in gm.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)]
    from kiln.frontend import normalize

    return higher, normalize.normalize(gm)


@pytest.mark.parametrize("name", CASES)
def test_inlined_graph_equals_eager(name):
    """The export holds a higher-order op; after normalisation none is left and the graph
    computes what eager PyTorch does (for cond, on inputs taking each branch)."""
    make, shape, context = CASES[name]
    module = make().eval()
    (x,) = seeded(1, shape)
    higher, gm = _exported_normalised(module, x, context)
    assert higher, "the export holds no higher-order op: the case tests nothing"
    assert not any(isinstance(n.target, torch._ops.HigherOrderOperator) for n in gm.graph.nodes)
    assert not [
        n
        for n in gm.graph.nodes
        if n.op == "get_attr" and isinstance(functools.reduce(getattr, n.target.split("."), gm), nn.Module)
    ]
    for sample in (x, x.abs() + 0.1, -x.abs() - 0.1):
        torch.testing.assert_close(gm(sample), module(sample), rtol=0, atol=1e-6)


def test_while_loop_is_refused_by_name():
    module = WhileLoop().eval()
    with pytest.raises(ModelError, match=r"node while_loop \(higher_order.while_loop\) .*Python for loop"):
        normalised(module, seeded(1, (2, 8)))


def test_a_submodule_call_is_refused_by_name():
    """A call_module node (a graph that is not flat) is refused, not an internal error."""
    from kiln.frontend import normalize

    gm = torch.export.export(nn.Sequential(nn.ReLU()), seeded(1, (2, 3)), strict=False).module(check_guards=False)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_module("inner", (x,)))
    outer = torch.fx.GraphModule({"inner": gm}, graph)
    with pytest.raises(ModelError, match="node inner calls submodule inner"):
        normalize.normalize(outer)


@pytest.fixture(scope="module")
def compiled():
    """The grad, autocast and cond cases compiled for ethos-u85-256, with their inputs."""
    from kiln import compile as kc
    from kiln.frontend.export import LoadedModel
    from kiln.spec import CompileSpec

    out = {}
    for name in ("no_grad_rotary", "autocast_off", "cond_on_input"):
        make, shape, _ = CASES[name]
        inputs = seeded(2, shape)
        spec = CompileSpec("ethos-u85-256")
        out[name] = (kc.compile_model(LoadedModel(name, make().eval(), inputs), spec, log=lambda line: None), inputs)
    return out


@pytest.mark.parametrize("name", ["no_grad_rotary", "autocast_off", "cond_on_input"])
def test_compiled_program_within_two_steps_of_pt2e(compiled, name):
    """run-host against the PT2E reference: every element within two output steps; the ops of
    the region run on the NPU."""
    from kiln.reference import run_host as host
    from tests.compiler.random_models import steps_off_pt2e

    result, inputs = compiled[name]
    got = host.run(result.pte, [x.numpy() for x in inputs])
    worst, _ = steps_off_pt2e(result, inputs, got)
    assert worst <= 2
    cpu = [o["op"] for o in result.report["ops"] if o["where"] == "cpu" and "quantize" not in o["op"]]
    assert cpu == []
