"""ExecuTorch 1.5.1's Cortex-M programs on kiln: ds_cnn and resnet8 of kiln's zoo through
ExecuTorch's own flow for cortex-m55 (scripts/make_executorch_cortex_m_fixtures.sh: every
compute op an ExecuTorch cortex_m:: operator, activations channels-last, scratch buffers and
views planned in memory), each a bundle of the zoo's example input and the output of
ExecuTorch's quantized reference model (PT2E, in PyTorch).

kiln's loader binds them, and `kiln run-host` and kiln's runner on cortex-m55 (the virtual
platform) give the bundle's expected outputs within the output steps below: the integer
kernels are CMSIS-NN's arithmetic (tests/compiler/test_cortex_m_kernels.py holds each against
ExecuTorch's Python implementation), the reference computes each op in float and quantizes it.
The runner also equals run-host bit for bit on kiln's bundle of the same program (three cases:
the example input and two seeded ones; bundle inputs are contiguous, so the runner lays out
resnet8's channels-last input)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from kiln import flow
from kiln.pte import dim_order
from kiln.pte.bundle import deserialize_bundle
from kiln.pte.reader import deserialize
from kiln.pte.schema import Double, Tensor
from kiln.reference import run_host
from kiln.reference.bundled import make_bundle
from tests.compiler.test_pte import needs_executorch
from tests.helpers import once

ROOT = Path(__file__).resolve().parents[2]
MAKE = ROOT / "scripts" / "make_executorch_cortex_m_fixtures.sh"
TARGET = "cortex-m55"
pytestmark = [pytest.mark.fvp, pytest.mark.executorch, needs_executorch]

# Output steps (the scale of the program's dequantized output) between kiln's integer results
# and the bundle's PT2E outputs, as seen: ExecuTorch's multipliers (quantize_multiplier's form)
# round twice at resnet8's nine convolutions, which adds up to two steps at its logits (kiln's
# own programs round once there and stay within one: tests/fvp/test_mlperf_tiny_cpus.py).
STEPS = {"ds_cnn": 1, "resnet8": 2}


@pytest.fixture(scope="module")
def bundles(work) -> Path:
    """The folder of ExecuTorch's bundles, made once per test run (about 25 s per model)."""

    def make(folder: Path):
        done = subprocess.run([str(MAKE), str(folder), *STEPS], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr

    return once(work / "executorch-cortex-m", make)


def bundle_path(bundles: Path, model: str) -> Path:
    return bundles / f"{model}_arm_{TARGET}.bpte"


def output_step(program: bytes) -> float:
    """The scale of the program's last instruction, the dequantize of its output."""
    plan = deserialize(program).forward()
    last = plan.chains[0].instructions[-1]
    assert plan.operators[last.op_index].name == "cortex_m::dequantize_per_tensor"
    scale = plan.values[last.args[1]]
    assert isinstance(scale, Double)
    return scale.value


@pytest.mark.parametrize("model", STEPS)
def test_the_program_is_executorch_s_cortex_m_program(bundles, model):
    """What the fixture holds: ExecuTorch's cortex_m operators only, channels-last activations."""
    plan = deserialize(deserialize_bundle(bundle_path(bundles, model).read_bytes()).program).forward()
    assert {o.name.split("::")[0] for o in plan.operators} == {"cortex_m"}
    assert {"cortex_m::quantized_conv2d", "cortex_m::quantized_avg_pool2d", "cortex_m::quantized_linear"} <= {
        o.name for o in plan.operators
    }
    layouts = [dim_order.layout(v.sizes, v.dim_order) for v in plan.values if isinstance(v, Tensor)]
    assert dim_order.CHANNELS_LAST in layouts and None not in layouts


@pytest.mark.parametrize("model", STEPS)
def test_run_host_gives_the_bundle_s_expected_outputs(bundles, model):
    bundle = deserialize_bundle(bundle_path(bundles, model).read_bytes())
    (case,) = bundle.suites[0].cases
    (got,) = run_host.run(bundle.program, [t.array() for t in case.inputs])
    (want,) = [t.array() for t in case.expected_outputs]
    steps = np.rint(np.abs(got.astype(np.float64) - want) / output_step(bundle.program))
    assert steps.max() == STEPS[model], steps


@pytest.mark.parametrize("model", STEPS)
def test_the_runner_passes_executorch_s_bundle(builder, bundles, model):
    path = bundle_path(bundles, model)
    step = output_step(deserialize_bundle(path.read_bytes()).program)
    elf = builder(path, TARGET)
    atol = f"{STEPS[model] * step * 1.001:.6f}"  # the steps, and float32's rounding of the dequantize
    result = flow.run(flow.firmware(elf, TARGET, arguments=(f"--atol={atol}",)), platform="virtual")
    checks, verdict = flow.bundle_checks(result.uart)
    assert result.status == 0 and verdict is True, "\n".join(result.uart)
    assert [(c.case, c.within) for c in checks] == [(0, True)]
    assert checks[0].max_diff > STEPS[model] * step * 0.99  # the steps seen on the host, on the device


@pytest.mark.parametrize("model", STEPS)
def test_the_runner_equals_run_host_on_kiln_s_bundle_of_the_program(builder, bundles, work, model):
    source = deserialize_bundle(bundle_path(bundles, model).read_bytes())
    example = {"forward": [t.array() for t in source.suites[0].cases[0].inputs]}
    path = work / f"executorch-cortex-m-{model}-kiln.bpte"
    path.write_bytes(make_bundle(source.program, 3, seed=9, first=example))
    result = flow.run(flow.firmware(builder(path, TARGET), TARGET), platform="virtual")
    checks, verdict = flow.bundle_checks(result.uart)
    assert result.status == 0 and verdict is True, "\n".join(result.uart)
    assert [(c.case, c.max_diff) for c in checks] == [(0, 0.0), (1, 0.0), (2, 0.0)]
