"""Bundles on the device: kiln's executor runner with a BundledProgram (.bpte) baked in runs
every case and checks every output on the virtual platform. ExecuTorch's own bundles of its
Ethos-U flow (its reference model's outputs) pass; kiln's (run-host's outputs) passes exactly;
an expected output altered by one passes no more (exit 7, naming the case, the output, the
difference and the element); damaged bundles end with their own error (exit 3)."""

from pathlib import Path

import numpy as np
import pytest

from kiln import cli, flow
from kiln.pte.bundle import Bundle, BundleTensor, MethodCase, MethodSuite, deserialize_bundle, serialize_bundle
from kiln.reference.bundled import make_bundle
from tests.firmware.runtime import state_program

from .helpers import compiled

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
pytestmark = pytest.mark.fvp

EXIT_LOAD, EXIT_MISMATCH = 3, 7  # firmware/apps/executor_runner/runner.h


def run(elf: Path, *arguments: str) -> flow.RunResult:
    return flow.run(flow.firmware(elf, "ethos-u55-128", arguments=arguments), platform="virtual")


@pytest.mark.parametrize("name, outputs", [("conv_relu", 1), ("add2", 3)])
def test_executorch_bundle_passes_on_kiln(builder, name, outputs):
    """ExecuTorch's bundles of its Arm flow (scripts/make_executorch_fixtures.sh): conv_relu, and
    add2's two inputs and three outputs; their expected outputs are ExecuTorch's own."""
    result = run(builder(FIXTURES / f"{name}_arm_delegate_ethos-u55-128.bpte"))
    checks, verdict = flow.bundle_checks(result.uart)
    assert result.status == 0, "\n".join(result.uart)
    assert verdict is True
    assert [(c.method, c.case, c.output, c.within) for c in checks] == [("forward", 0, k, True) for k in range(outputs)]


@pytest.fixture(scope="module")
def digits_bundle(work) -> tuple[Path, Bundle]:
    """digits' bundle of two seeded cases, written by `kiln bundle`."""
    path = work / "bundle-digits.bpte"
    assert (
        cli.main(["bundle", str(compiled(work, "digits")), "--output", str(path), "--cases", "2", "--seed", "3"]) == 0
    )
    return path, deserialize_bundle(path.read_bytes())


def test_kiln_bundle_passes_exactly_and_an_altered_output_fails(builder, digits_bundle, tmp_path):
    path, bundle = digits_bundle
    result = run(builder(path))
    checks, verdict = flow.bundle_checks(result.uart)
    assert result.status == 0, "\n".join(result.uart)
    assert verdict is True
    assert [(c.case, c.max_diff, c.within) for c in checks] == [(0, 0.0, True), (1, 0.0, True)]

    # Case 1's output, element 3 one larger: the runner names it, with the difference.
    expected = bundle.suites[0].cases[1].expected_outputs[0].array().copy()
    expected.flat[3] += 1.0
    cases = list(bundle.suites[0].cases)
    cases[1] = MethodCase(cases[1].inputs, [BundleTensor.of(expected)])
    altered = tmp_path / "altered.bpte"
    altered.write_bytes(serialize_bundle(Bundle(bundle.program, [MethodSuite("forward", cases)])))
    elf = builder(altered)
    result = run(elf)
    checks, verdict = flow.bundle_checks(result.uart)
    assert result.status == EXIT_MISMATCH, "\n".join(result.uart)
    assert verdict is False
    failed = [c for c in checks if not c.within]
    assert [(c.case, c.output, c.at) for c in failed] == [(1, 0, 3)]
    assert failed[0].max_diff == pytest.approx(1.0, abs=1e-6)
    # a tolerance of 1 lets it pass: kiln run passes --atol on; one the firmware cannot read is a usage error
    command = ["run", "--elf", str(elf), "--target", "ethos-u55-128", "--platform", "virtual"]
    assert cli.main([*command, "--atol", "1"]) == 0
    with pytest.raises(SystemExit) as refused:
        cli.main([*command, "--atol", "1e-3"])
    assert refused.value.code == 2


def test_a_bundle_of_two_methods_carries_their_state_from_case_to_case(builder, work):
    """The two-method state program (tests/firmware/runtime/state_program.py): kiln's bundle holds
    a suite per method, its expected outputs those numpy works out for the cases in the bundle's
    order over one state (accumulate twice, then scale twice), and the firmware, running them in
    that order, matches them exactly."""
    path = work / "bundle-state.bpte"
    path.write_bytes(make_bundle(state_program.write(), 2, seed=5))
    bundle = deserialize_bundle(path.read_bytes())
    assert [s.method_name for s in bundle.suites] == list(state_program.METHODS)
    calls = [(s.method_name, c.inputs[0].array()) for s in bundle.suites for c in s.cases]
    worked_out = [y for y, _ in state_program.expected(calls)]
    bundled = [c.expected_outputs[0].array() for s in bundle.suites for c in s.cases]
    assert [y.tolist() for y in bundled] == [y.tolist() for y in worked_out]
    result = run(builder(path))
    checks, verdict = flow.bundle_checks(result.uart)
    assert result.status == 0 and verdict is True, "\n".join(result.uart)
    assert [(c.method, c.case, c.max_diff) for c in checks] == [
        ("accumulate", 0, 0.0),
        ("accumulate", 1, 0.0),
        ("scale", 0, 0.0),
        ("scale", 1, 0.0),
    ]


def test_damaged_bundles_are_refused(builder, digits_bundle, tmp_path):
    path, bundle = digits_bundle
    data = path.read_bytes()
    truncated = tmp_path / "truncated.bpte"
    truncated.write_bytes(data[: len(data) // 3])
    result = run(builder(path, "ethos-u55-128", f"--bake={truncated}"))
    assert result.status == EXIT_LOAD
    # the loader's out-of-bounds error, b the size it must lie in: the truncated bundle's
    assert "loading the bundle failed: pte: offset or size out of bounds" in "\n".join(result.uart)
    assert any(line.endswith(f", b={len(data) // 3})") for line in result.uart), result.uart

    foreign = tmp_path / "foreign.bpte"
    foreign.write_bytes(data[:4] + b"BP99" + data[8:])
    result = run(builder(path, "ethos-u55-128", f"--bake={foreign}"))
    assert result.status == EXIT_LOAD
    assert any(line.startswith("loading the .pte failed:") and "identifier" in line for line in result.uart), (
        result.uart
    )

    case = bundle.suites[0].cases[0]
    x = case.inputs[0].array()
    wrong = tmp_path / "wrong_input.bpte"
    bad = MethodCase([BundleTensor.of(x.reshape(-1)[:-1])], case.expected_outputs)
    wrong.write_bytes(serialize_bundle(Bundle(bundle.program, [MethodSuite("forward", [bad])])))
    result = run(builder(wrong))
    assert result.status == EXIT_LOAD
    line = next(line for line in result.uart if line.startswith("bundle: forward case 0 input 0"))
    size = x.size - 1
    assert line == (
        f"bundle: forward case 0 input 0: the bundle gives float32 [{size}] ({4 * size} bytes); the method's is "
        f"float32 [{', '.join(map(str, x.shape))}] ({4 * x.size} bytes)"
    )
    assert np.dtype(x.dtype) == np.float32  # digits takes float input (the line's type names)
