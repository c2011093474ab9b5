"""L2 normalisation and vector norms (decompose.vector_norm, linalg_norm, fuse_l2_normalize):
F.normalize, torch.linalg.vector_norm / linalg.norm / torch.norm of ord 2, 1, inf, -inf and 3
equal eager PyTorch after normalisation (eps semantics included: a zero row, a clamped norm);
compiled, on the NPU or on the CPU kernels, within two output steps of the PT2E reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.helpers import Lambda, call_targets, normalised, seeded

aten = torch.ops.aten

CASES = {  # name -> fn(x)
    "normalize_last": lambda x: F.normalize(x, dim=-1),
    "normalize_dim1_eps": lambda x: F.normalize(x, dim=1, eps=0.5),
    "normalize_tiny_eps": lambda x: F.normalize(x, dim=-1, eps=1e-30),
    "divide_by_norm": lambda x: x / x.norm(dim=-1, keepdim=True),  # as CLIP-style heads write it
    "vector_norm_2_keepdim": lambda x: torch.linalg.vector_norm(x, 2, -1, True),
    "vector_norm_all": lambda x: torch.linalg.vector_norm(x),
    "vector_norm_1": lambda x: torch.linalg.vector_norm(x, 1, (1, 2)),
    "vector_norm_inf": lambda x: torch.linalg.vector_norm(x, float("inf"), -1),
    "vector_norm_neg_inf": lambda x: torch.linalg.vector_norm(x, float("-inf"), -1, True),
    "vector_norm_3": lambda x: torch.linalg.vector_norm(x, 3, -1),
    "linalg_norm_vector": lambda x: torch.linalg.norm(x, dim=-1),
    "torch_norm_p1": lambda x: torch.norm(x, p=1, dim=1),
    "tensor_norm": lambda x: x.norm(dim=-1, keepdim=True),
}


def _input():
    (x,) = seeded(5, (2, 6, 8))
    x[0, 2] = 0.0  # a zero row: F.normalize gives 0 / eps = 0
    x[1, 3] *= 0.01  # a row whose norm is under eps=0.5
    return x


@pytest.mark.parametrize("name", CASES)
def test_decomposed_equals_eager(name):
    module, x = Lambda(lambda layers, x: CASES[name](x)).eval(), _input()
    gm = normalised(module, (x,))
    assert not {aten.linalg_vector_norm.default, aten.linalg_norm.default} & call_targets(gm)
    torch.testing.assert_close(gm(x), module(x), rtol=1e-5, atol=1e-6, equal_nan=True)  # 0 / 0 without eps


def test_normalize_is_one_rsqrt_of_the_clamped_sum_of_squares():
    """x * rsqrt(max(sum(x^2), eps^2)): no sqrt, no reciprocal; with eps^2 underflowing float32
    (eps=1e-30) the sqrt / clamp / reciprocal form stays, so a zero row is 0, not 0 * inf."""
    x = _input()
    for name in ("normalize_last", "divide_by_norm"):
        fused = call_targets(normalised(Lambda(lambda layers, x, name=name: CASES[name](x)).eval(), (x,)))
        assert aten.rsqrt.default in fused and not {aten.sqrt.default, aten.reciprocal.default} & fused
    module = Lambda(lambda layers, x: CASES["normalize_tiny_eps"](x)).eval()
    gm = normalised(module, (x,))
    assert aten.rsqrt.default not in call_targets(gm)
    assert torch.equal(gm(x)[0, 2], torch.zeros(8))


def test_a_matrix_norm_is_left_to_pytorch():
    module = Lambda(lambda layers, x: torch.linalg.norm(x, ord=2, dim=(1, 2))).eval()
    gm = normalised(module, (_input(),))
    assert aten.linalg_norm.default in call_targets(gm)


COMPILED = {  # name -> (fn, target, delegate)
    "normalize_u85": ("normalize_last", "ethos-u85-256", True),
    "normalize_u55": ("normalize_dim1_eps", "ethos-u55-128", True),
    "normalize_cpu": ("normalize_last", "ethos-u85-256", False),
    "norm_1_u85": ("vector_norm_1", "ethos-u85-256", True),
    "norm_inf_u85": ("vector_norm_inf", "ethos-u85-256", True),
    "norm_2_cpu": ("vector_norm_2_keepdim", "ethos-u55-128", False),
}
# Steps off PT2E allowed, 2 unless listed. normalize_cpu's linear layer runs as the integer
# cortex_m::quantized_linear, within one step of PT2E's float linear; the normalization
# divides by the norm of 8 such values and takes that step to 4 of its output's.
STEPS = {"normalize_cpu": 4}


class Embedding(torch.nn.Module):
    """A linear projection, then the case's norm (as a retrieval embedding head ends)."""

    def __init__(self, fn):
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.fn = torch.nn.Linear(8, 8), fn

    def forward(self, x):
        return self.fn(self.linear(x))


@pytest.fixture(scope="module")
def compiled():
    from kiln import compile as kc
    from kiln.frontend.export import LoadedModel
    from kiln.spec import CompileSpec

    out = {}
    for name, (case, target, delegate) in COMPILED.items():
        inputs = (_input(),)
        spec = CompileSpec(target, delegate=delegate)
        result = kc.compile_model(LoadedModel(name, Embedding(CASES[case]).eval(), inputs), spec, log=lambda _: None)
        out[name] = (result, inputs)
    return out


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_within_two_steps_of_pt2e(compiled, name):
    from kiln.reference import run_host as host
    from tests.compiler.random_models import steps_off_pt2e

    result, inputs = compiled[name]
    got = host.run(result.pte, [x.numpy() for x in inputs])
    assert steps_off_pt2e(result, inputs, got)[0] <= STEPS.get(name, 2)
    cpu = [o["op"] for o in result.report["ops"] if o["where"] == "cpu" and "quantize" not in o["op"]]
    assert (cpu == []) == COMPILED[name][2]


def test_float_program_equals_eager():
    """--no-quantize: the float CPU kernels of the decomposition against eager PyTorch."""
    from kiln import compile as kc
    from kiln.frontend.export import LoadedModel
    from kiln.reference import run_host as host
    from kiln.spec import CompileSpec

    module, x = Embedding(CASES["normalize_dim1_eps"]).eval(), _input()
    spec = CompileSpec("ethos-u55-128", quantize=False)
    result = kc.compile_model(LoadedModel("l2_float", module, (x,)), spec, log=lambda _: None)
    (got,) = host.run(result.pte, [x.numpy()])
    torch.testing.assert_close(torch.from_numpy(got), module(x), rtol=1e-5, atol=1e-6)
