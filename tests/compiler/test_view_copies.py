"""The *_copy forms of view ops (what ExecuTorch's operator tests and edge dialect feed in) become
their views (normalize.views_for_copies): equal to eager PyTorch after normalisation, and
compiled for ethos-u85-256 they are quantized and run on the NPU like the views, within two
output steps of the PT2E reference."""

from __future__ import annotations

import pytest
import torch

from kiln.frontend.normalize import VIEW_COPIES
from tests.compiler.helpers import Lambda, call_targets, normalised, seeded

aten = torch.ops.aten

CASES = {  # name -> fn(x) of a (1, 4, 6, 8) input; each reads an op of VIEW_COPIES
    "transpose_copy": lambda x: aten.transpose_copy.int(x, 1, 3) * 2.0,
    "permute_copy": lambda x: aten.permute_copy.default(x, [0, 2, 3, 1]) + 1.0,
    "view_copy": lambda x: aten.view_copy.default(x, [1, 24, 8]) * 2.0,
    "reshape_copy": lambda x: aten._reshape_copy.default(x, [4, 48]) * 2.0,
    "expand_copy": lambda x: aten.expand_copy.default(x[:, :1], [1, 4, 6, 8]) + x,
    "slice_copy": lambda x: aten.slice_copy.Tensor(x, 2, 1, 5) * 2.0,
    "select_copy": lambda x: aten.select_copy.int(x, 1, 2) * 2.0,
    "unsqueeze_copy": lambda x: aten.unsqueeze_copy.default(x, 2) * 2.0,
    "squeeze_copy": lambda x: aten.squeeze_copy.dim(x[:, :, :1], 2) * 2.0,
    "squeeze_copy_dims": lambda x: aten.squeeze_copy.dims(x[:, :1, :1], [1, 2]) * 2.0,
    "squeeze_copy_all": lambda x: aten.squeeze_copy.default(x[:, :1]) * 2.0,
    "t_copy": lambda x: aten.t_copy.default(x[0, 0]) * 2.0,
    "alias_copy": lambda x: aten.alias_copy.default(x) * 2.0,
    "detach_copy": lambda x: aten.detach_copy.default(x) * 2.0,
    "unbind_copy": lambda x: torch.relu(aten.unbind_copy.int(x, 1)[2]),
    "split_copy": lambda x: aten.split_copy.Tensor(x, 3, 2)[1] * 2.0,
    "split_with_sizes_copy": lambda x: aten.split_with_sizes_copy.default(x, [2, 6], 3)[1] * 2.0,
    "narrow_copy": lambda x: aten.narrow_copy.default(x, 3, 2, 4) * 2.0,
    "diagonal_copy": lambda x: aten.diagonal_copy.default(x, 0, 2, 3) * 2.0,
    "unfold_copy": lambda x: aten.unfold_copy.default(x, 3, 4, 2) * 2.0,
    "as_strided_copy": lambda x: aten.as_strided_copy.default(x, [4, 8], [8, 1], 8) * 2.0,
}
ON_THE_NPU = [n for n in CASES if n not in ("diagonal_copy", "unfold_copy", "as_strided_copy")]  # views the NPU runs


def _module(name):
    return Lambda(lambda layers, x: CASES[name](x)).eval(), seeded(6, (1, 4, 6, 8))


@pytest.mark.parametrize("name", CASES)
def test_copy_becomes_its_view_and_equals_eager(name):
    module, inputs = _module(name)
    gm = normalised(module, inputs)
    assert not set(VIEW_COPIES) & call_targets(gm)
    torch.testing.assert_close(gm(*inputs), module(*inputs), rtol=0, atol=0)


def test_every_copy_op_has_a_case():
    exported = set()
    for name in CASES:
        module, inputs = _module(name)
        ep = torch.export.export(module, inputs, strict=False)
        exported |= {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert set(VIEW_COPIES) <= exported


@pytest.fixture(scope="module")
def compiled():
    """Every NPU case in one model (one output each), compiled for ethos-u85-256."""
    from kiln import compile as kc
    from kiln.frontend.export import LoadedModel
    from kiln.spec import CompileSpec

    module = Lambda(lambda layers, x: tuple(CASES[name](layers[0](x)) for name in ON_THE_NPU), torch.nn.Identity())
    inputs = seeded(7, (1, 4, 6, 8))
    spec = CompileSpec("ethos-u85-256")
    return kc.compile_model(LoadedModel("view_copies", module.eval(), inputs), spec, log=lambda _: None), inputs


def test_copies_run_on_the_npu_within_two_steps_of_pt2e(compiled):
    from kiln.reference import run_host as host
    from tests.compiler.random_models import steps_off_pt2e

    result, inputs = compiled
    cpu = [o["op"] for o in result.report["ops"] if o["where"] == "cpu" and "quantize" not in o["op"]]
    assert cpu == []
    got = host.run(result.pte, [x.numpy() for x in inputs])
    assert steps_off_pt2e(result, inputs, got)[0] <= 2
