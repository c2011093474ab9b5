"""kiln's BundledProgram (.bpte) against ExecuTorch 1.5.1's: ExecuTorch's reader (run in
.venv-executorch) reads what kiln.pte.bundle writes, kiln reads what ExecuTorch's Arm flow
writes (tests/fixtures/executorch, scripts/make_executorch_fixtures.sh), and the expected
outputs kiln.reference.bundled computes equal those ExecuTorch computed with its quantized
reference model (aot_arm_compiler's PT2E model, run in PyTorch)."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kiln import cli, models
from kiln.errors import PteError, UsageError
from kiln.firmware import runner_build
from kiln.pte.bundle import (
    BUNDLE_VERSION,
    Bundle,
    BundleTensor,
    MethodCase,
    MethodSuite,
    deserialize_bundle,
    serialize_bundle,
)
from kiln.pte.schema import ScalarType
from kiln.reference.bundled import make_bundle

from .test_pte import ET_PYTHON, needs_executorch

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
ET_BUNDLE = FIXTURES / "conv_relu_arm_delegate_ethos-u55-128.bpte"
ET_PTE = FIXTURES / "conv_relu_arm_delegate_ethos-u55-128.pte"

# ExecuTorch's reading of a .bpte, as JSON: version, program bytes (hex), and per suite its
# method name and cases, each value a tensor (type, sizes, data hex, dim order) or a scalar.
ET_READ = """
import json, sys
from executorch.devtools.bundled_program.serialize import deserialize_from_flatbuffer_to_bundled_program
b = deserialize_from_flatbuffer_to_bundled_program(open(sys.argv[1], "rb").read())
def value(v):
    v = v.val
    if type(v).__name__ == "Tensor":
        return {"type": int(v.scalar_type), "sizes": list(v.sizes), "data": bytes(v.data).hex(),
                "dim_order": list(v.dim_order)}
    return {"scalar": [v.int_val if hasattr(v, "int_val") else v.bool_val if hasattr(v, "bool_val") else v.double_val]}
print(json.dumps({"version": b.version, "program": bytes(b.program).hex(), "suites": [
    {"name": s.method_name, "cases": [{"inputs": [value(v) for v in c.inputs],
                                        "outputs": [value(v) for v in c.expected_outputs]} for c in s.test_cases]}
    for s in b.method_test_suites]}))
"""


def et_read(path: Path) -> dict:
    run = subprocess.run([str(ET_PYTHON), "-c", ET_READ, str(path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def as_json(v) -> dict:
    if isinstance(v, BundleTensor):
        return {
            "type": int(v.scalar_type),
            "sizes": list(v.sizes),
            "data": v.data.hex(),
            "dim_order": list(v.dim_order),
        }
    return {"scalar": [v]}


@needs_executorch
def test_executorch_reads_what_kiln_writes(tmp_path):
    """Two methods, tensors of three types (one empty) and the three scalar kinds, written by
    kiln: ExecuTorch's reader finds the same program bytes, names, types, sizes and data."""
    x = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    suites = [
        MethodSuite(
            "forward",
            [
                MethodCase([BundleTensor.of(x)], [BundleTensor.of(np.array([[1.5, -2.25]], np.float32))]),
                MethodCase([BundleTensor.of(-x), 7, True, 0.5], [BundleTensor.of(np.zeros((0, 2), np.int32))]),
            ],
        ),
        MethodSuite("decode", [MethodCase([BundleTensor.of(np.array([3], np.int64))], [])]),
    ]
    program = ET_PTE.read_bytes()
    path = tmp_path / "hand.bpte"
    path.write_bytes(serialize_bundle(Bundle(program, suites)))
    read = et_read(path)
    assert read["version"] == BUNDLE_VERSION
    assert bytes.fromhex(read["program"]) == program
    assert [s["name"] for s in read["suites"]] == ["forward", "decode"]
    for suite, theirs in zip(suites, read["suites"]):
        assert [
            {"inputs": [as_json(v) for v in c.inputs], "outputs": [as_json(v) for v in c.expected_outputs]}
            for c in suite.cases
        ] == theirs["cases"]
    # the hand-written values, spelt out: int8 is ScalarType 1, its bytes two's complement
    first = read["suites"][0]["cases"][0]["inputs"][0]
    assert first["type"] == 1 and first["sizes"] == [3, 4] and first["data"][:4] == "fafb"


@needs_executorch
@pytest.mark.parametrize("name", ["conv_relu", "add2"])
def test_kiln_reads_what_executorch_writes(name):
    path = FIXTURES / f"{name}_arm_delegate_ethos-u55-128.bpte"
    theirs = et_read(path)
    ours = deserialize_bundle(path.read_bytes())
    assert ours.version == theirs["version"]
    assert ours.program.hex() == theirs["program"]
    assert [
        {
            "name": s.method_name,
            "cases": [
                {"inputs": [as_json(v) for v in c.inputs], "outputs": [as_json(v) for v in c.expected_outputs]}
                for c in s.cases
            ],
        }
        for s in ours.suites
    ] == theirs["suites"]


def test_expected_outputs_equal_executorch_reference_ones():
    """ExecuTorch's bundle holds its quantized reference model's output for the example input;
    kiln's bundle of the same program, that input first, expects the same (run-host: the
    delegate's command stream on kiln's NPU model), and its seeded cases differ from it."""
    theirs = deserialize_bundle(ET_BUNDLE.read_bytes())
    case = theirs.suites[0].cases[0]
    ours = deserialize_bundle(make_bundle(theirs.program, 3, seed=1, first={"forward": [case.inputs[0].array()]}))
    assert [s.method_name for s in ours.suites] == ["forward"] and len(ours.suites[0].cases) == 3
    first = ours.suites[0].cases[0]
    assert first.inputs == case.inputs
    np.testing.assert_array_equal(first.expected_outputs[0].array(), case.expected_outputs[0].array())
    seeded = ours.suites[0].cases[1]
    assert seeded.inputs[0].sizes == case.inputs[0].sizes and seeded.inputs[0].data != case.inputs[0].data


def test_compile_bundles_the_example_input_first(tmp_path):
    """kiln compile --bundle 2 writes F.bpte beside F.pte: its first case is the zoo's example input,
    and each case expects what `kiln run-host` writes for its inputs."""
    pte = tmp_path / "digits.pte"
    assert cli.main(["compile", "digits", "--target", "ethos-u55-128", "--output", str(pte), "--bundle", "2"]) == 0
    bundle = deserialize_bundle(pte.with_suffix(".bpte").read_bytes())
    _, example = models.load("digits")
    cases = bundle.suites[0].cases
    assert len(cases) == 2
    np.testing.assert_array_equal(cases[0].inputs[0].array(), example[0].numpy())
    for k, case in enumerate(cases):
        given = tmp_path / f"input_{k}.bin"
        given.write_bytes(case.inputs[0].data)
        assert cli.main(["run-host", str(pte), "--input", str(given), "--output-dir", str(tmp_path / f"out{k}")]) == 0
        assert (tmp_path / f"out{k}" / "output_0.bin").read_bytes() == case.expected_outputs[0].data


def test_a_damaged_bundle_is_a_pte_error():
    data = ET_BUNDLE.read_bytes()
    with pytest.raises(PteError, match="file identifier is b'BP09'"):
        deserialize_bundle(data[:4] + b"BP09" + data[8:])
    with pytest.raises(PteError, match="outside the program"):
        deserialize_bundle(data[: len(data) // 2])


def test_a_bundle_tensor_of_unknown_bytes_is_refused():
    t = BundleTensor(ScalarType.FLOAT, (2, 2), bytes(12), (0, 1))
    with pytest.raises(PteError, match="holds 12 bytes"):
        t.array()


def test_a_bundle_builds_alone():
    """The runner checks a bundle in an image of one model: beside another .pte it is refused."""
    with pytest.raises(UsageError, match="give it alone to --pte"):
        runner_build.plan([ET_PTE, FIXTURES / "add2_arm_delegate_ethos-u55-128.bpte"], "ethos-u55-128")
    assert runner_build.plan([FIXTURES / "add2_arm_delegate_ethos-u55-128.bpte"], "ethos-u55-128").models
