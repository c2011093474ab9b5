"""Programs with several methods sharing state (kiln.frontend.state): each method compiles, the
state is ExecuTorch's shared mutable buffer (memory id 2, one offset in every method), `kiln
run-host` carries it from call to call exactly as the PT2E references of the methods do when
chained, and ExecuTorch 1.5.1's reader reads the file."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch
from torch import nn

from kiln import compile as kc
from kiln.errors import ModelError, UsageError
from kiln.pte.llm import constant_method
from kiln.pte.reader import deserialize
from kiln.pte.schema import STATE_MEMORY_ID, Tensor
from kiln.reference import run_host as host
from kiln.spec import CompileSpec

from .helpers import Float64Arithmetic, output_scales, steps_off
from .test_pte import ET_PYTHON, needs_executorch


class Accumulator(nn.Module):
    """`step` adds a linear map of its input to a running total and returns twice the total;
    `peek` reads the total without writing it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.linear = nn.Linear(8, 8)
        self.register_buffer("total", torch.zeros(1, 8))

    def step(self, x):
        self.total.add_(self.linear(x))
        return self.total * 2

    def peek(self, x):
        return self.total + x


def accumulator() -> tuple[Accumulator, list[torch.Tensor]]:
    model = Accumulator().eval()
    generator = torch.Generator().manual_seed(5)
    xs = [torch.randn(1, 8, generator=generator) * 0.5 for _ in range(8)]
    model.kiln_methods = {"step": (xs[0],), "peek": (xs[0],)}
    model.kiln_calibration = [("step", (x,)) for x in xs[:4]] + [("peek", (x,)) for x in xs[:4]]
    model.kiln_constants = {"get_max_seq_len": 4}
    return model, xs


@pytest.fixture(scope="module")
def compiled():
    model, xs = accumulator()
    result = kc.compile_model(
        kc.frontend.LoadedModel("accumulator", model, xs[:1]), CompileSpec("ethos-u85-256"), log=lambda line: None
    )
    return result, xs


def test_methods_share_the_state_at_one_offset_of_buffer_2(compiled):
    result, _ = compiled
    f = deserialize(result.pte)
    assert f.methods() == ["step", "peek", "get_max_seq_len"]
    assert constant_method(f, "get_max_seq_len") == 4
    places = set()
    for name in ("step", "peek"):
        plan = f.method(name)
        state = [v for v in plan.values if isinstance(v, Tensor) and v.allocation_info is not None]
        state = [v for v in state if v.allocation_info.memory_id == STATE_MEMORY_ID]
        assert {v.name for v in state} == {"total"}
        places |= {v.allocation_info.offset for v in state}
        assert plan.non_const_buffer_sizes[STATE_MEMORY_ID] == 16  # 8 int8, 16-byte aligned
        assert len(plan.inputs) == 1 and len(plan.outputs) == 1  # the model's own only
    assert places == {0}
    assert result.report["state"]["buffers"][0]["zero_point"] == 0  # zeroed memory is 0.0


def test_run_host_carries_the_state_as_the_chained_pt2e_references_do(compiled):
    """Four calls (step, step, peek, step): run-host's outputs and state against the PT2E
    reference modules of the methods, chained with the state they return (in float64)."""
    result, xs = compiled
    state: dict[str, np.ndarray] = {}
    reference_state = torch.zeros(1, 8, dtype=torch.float64)
    (buffer,) = result.report["state"]["buffers"]
    for method, x in (("step", xs[4]), ("step", xs[5]), ("peek", xs[6]), ("step", xs[7])):
        module = result.methods[method].quantized_module
        with torch.no_grad():
            want = Float64Arithmetic(module).run(x, reference_state.float())
        (got,) = host.run(result.pte, [x.numpy()], method, state)
        scale = output_scales(module)[0]
        assert steps_off(got, want[0], scale).max() <= 1, method
        if method == "step":
            reference_state = want[1]
            expected = torch.round(reference_state / buffer["scale"]).clamp(-128, 127).numpy()
            assert np.abs(state["total"].astype(np.int64) - expected).max() <= 1
            assert state["total"].dtype == np.int8
    assert np.abs(state["total"]).max() > 10  # the total moved: the test compared something


def test_a_state_that_does_not_start_at_zero_is_refused():
    model, xs = accumulator()
    model.total.fill_(1.0)
    with pytest.raises(ModelError, match="state buffer total does not start at zero"):
        kc.compile_model(kc.frontend.LoadedModel("acc", model, xs[:1]), CompileSpec("ethos-u85-256"), log=print)


def test_methods_calibrate_by_replaying_their_calls_not_from_a_file(tmp_path):
    model, xs = accumulator()
    np.savez(tmp_path / "c.npz", xs[0].numpy())
    with pytest.raises(UsageError, match="calibrates them by replaying"):
        kc.compile_model(
            kc.frontend.LoadedModel("acc", model, xs[:1]), CompileSpec("ethos-u85-256"), tmp_path / "c.npz"
        )


@pytest.mark.executorch
@needs_executorch
def test_executorch_reads_the_methods_and_the_state(compiled, tmp_path):
    result, _ = compiled
    path = tmp_path / "acc.pte"
    path.write_bytes(result.pte)
    script = (
        "import sys\n"
        "from executorch.exir._serialize._program import deserialize_pte_binary\n"
        "p = deserialize_pte_binary(open(sys.argv[1], 'rb').read())\n"
        "p = getattr(p, 'program', p)\n"
        "for plan in p.execution_plan:\n"
        "    named = [v.val for v in plan.values if type(v.val).__name__ == 'Tensor' and v.val.extra_tensor_info]\n"
        "    print(plan.name, list(plan.non_const_buffer_sizes),\n"
        "          sorted({(t.extra_tensor_info.fully_qualified_name, t.allocation_info.memory_id) for t in named}))\n"
    )
    out = subprocess.run([str(ET_PYTHON), "-c", script, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        f"step [0, {result.methods['step'].program.planned_size}, 16] [('total', 2)]",
        f"peek [0, {result.methods['peek'].program.planned_size}, 16] [('total', 2)]",
        "get_max_seq_len [0] []",
    ]


def test_a_method_that_does_not_use_a_state_buffer_is_refused_by_name():
    model, xs = accumulator()
    model.twice = lambda x: x * 2
    model.kiln_methods = {"step": (xs[0],), "twice": (xs[0],)}
    model.kiln_calibration = [("step", (xs[0],)), ("twice", (xs[0],))]
    with pytest.raises(ModelError, match="state buffer total: a method of the model writes it"):
        kc.compile_model(kc.frontend.LoadedModel("acc", model, xs[:1]), CompileSpec("ethos-u85-256"), log=print)


def test_each_methods_report_times_the_method_alone(compiled):
    """A method's stages_s is its own compile's; the program's adds every method's to its own
    export, calibration and write."""
    result, _ = compiled
    step, peek = (result.report["methods"][m]["stages_s"] for m in ("step", "peek"))
    whole = result.report["stages_s"]
    assert {"export", "calibrate", "write"} <= set(whole) and "calibrate" not in step
    for name in ("quantize", "lower", "vela"):
        assert whole[name] == pytest.approx(step[name] + peek[name], abs=0.002)
        assert step[name] < whole[name] and peek[name] < whole[name]
