"""Empty tensors (a 0-sized dim) folded away by normalisation (fold_constants, drop_empty): a
cat with torch.tensor([]) or a tensor of a 0-sized dim (what a cache holds at the first decode
step) equals eager PyTorch after normalisation and compiles with no empty value in kiln's
graph, within two output steps of PT2E on run-host; an empty input or output is refused by name."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kiln.errors import ModelError
from tests.compiler.helpers import Lambda, call_targets, normalised, seeded

CASES = {  # name -> (fn(x), input shape)
    "cat_legacy_empty_1d": (lambda x: torch.cat([torch.tensor([]), x], -2) * 2.0, (1, 4, 3, 8)),
    "cat_new_zeros_0_dim": (lambda x: torch.cat([x.new_zeros(1, 4, 0, 8), x], -2) + 1.0, (1, 4, 3, 8)),
    "cat_zeros_and_empty_slice": (
        lambda x: torch.cat([torch.zeros(1, 0, 5), torch.tanh(x), x[:, :0], x * 0.5], 1),
        (1, 6, 5),
    ),
    "cat_of_empty_computed": (lambda x: torch.cat([x[:, 2:2] * 3.0, torch.relu(x)], 1), (1, 6, 5)),
    "sum_of_empty_slice": (lambda x: x + x[..., :0].sum(-1, keepdim=True), (1, 6, 5)),
    "empty_like_cache": (
        lambda x: torch.cat([torch.empty(1, 2, 0, 4).to(x.dtype), x.view(1, 2, 3, 4)], 2).mean(-1),
        (1, 24),
    ),
}


def _module(name):
    fn, shape = CASES[name]
    return Lambda(lambda layers, x: fn(x)).eval(), seeded(4, shape)


@pytest.mark.parametrize("name", CASES)
def test_normalised_graph_equals_eager_and_holds_no_empty_tensor(name):
    module, inputs = _module(name)
    gm = normalised(module, inputs)
    empty = [
        n.name for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].numel() == 0
    ]
    assert empty == []
    torch.testing.assert_close(gm(*inputs), module(*inputs), rtol=0, atol=1e-6)


def test_a_cat_keeps_its_other_operands():
    module, inputs = _module("cat_zeros_and_empty_slice")
    gm = normalised(module, inputs)
    (cat,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.cat.default]
    assert len(cat.args[0]) == 2


@pytest.fixture(scope="module")
def compiled():
    from kiln import compile as kc
    from kiln.frontend.export import LoadedModel
    from kiln.spec import CompileSpec

    out = {}
    for name in ("cat_legacy_empty_1d", "cat_zeros_and_empty_slice", "empty_like_cache"):
        module, inputs = _module(name)
        result = kc.compile_model(LoadedModel(name, module, inputs), CompileSpec("ethos-u85-256"), log=lambda _: None)
        out[name] = (result, inputs)
    return out


@pytest.mark.parametrize("name", ["cat_legacy_empty_1d", "cat_zeros_and_empty_slice", "empty_like_cache"])
def test_compiled_without_empty_values_within_two_steps_of_pt2e(compiled, name):
    from kiln.reference import run_host as host
    from tests.compiler.random_models import steps_off_pt2e

    result, inputs = compiled[name]
    shapes = [v.shape for op in result.graph.ops for v in (*op.inputs, *op.outputs)]
    assert all(0 not in shape for shape in shapes)
    got = host.run(result.pte, [x.numpy() for x in inputs])
    assert steps_off_pt2e(result, inputs, got)[0] <= 2
    assert [o["op"] for o in result.report["ops"] if o["where"] == "cpu" and "quantize" not in o["op"]] == []


def test_an_empty_output_is_refused_by_name():
    module = Lambda(lambda layers, x: (x * 2.0, F.relu(x)[:, :0])).eval()
    with pytest.raises(ModelError, match=r"output 1 of the model \(\w+\) is empty \(shape \[1, 0, 5\]\)"):
        normalised(module, seeded(1, (1, 6, 5)))


def test_an_empty_input_is_refused_by_name():
    module = Lambda(lambda layers, x, y: torch.cat([x, y], 1) * 2.0).eval()
    with pytest.raises(ModelError, match=r"input xs_1 is empty \(shape \[1, 0, 5\]\)"):
        normalised(module, (torch.randn(1, 6, 5), torch.randn(1, 0, 5)))


def test_new_zeros_of_nonzero_size_is_folded_to_a_constant():
    module = Lambda(lambda layers, x: x + x.new_zeros(1, 6, 5) + x.new_ones(5)).eval()
    (x,) = seeded(1, (1, 6, 5))
    gm = normalised(module, (x,))
    assert not {torch.ops.aten.new_zeros.default, torch.ops.aten.new_ones.default} & call_targets(gm)
    torch.testing.assert_close(gm(x), module(x))
