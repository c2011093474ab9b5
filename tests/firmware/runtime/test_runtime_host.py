"""kiln's runtime core built for the host under AddressSanitizer and UBSan.

References independent of the C++ code: kiln.pte.reader (the Python reader) for what the
loader reports, `kiln run-host` (kiln.reference.run_host over kiln.program.kernels' numpy) for what the
executor and kernels compute, and hand-made corruptions for the loader's errors.
"""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.program import kernels
from kiln.program.kernels import by_name
from kiln.pte import writer
from kiln.pte.reader import deserialize
from kiln.pte.schema import NUMPY_DTYPES, Chain, KernelCall
from kiln.reference import run_host as host
from kiln.spec import CompileSpec

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
sys.path.insert(0, str(ROOT / "firmware" / "runtime"))
import gen_kernel_table  # noqa: E402

from tests.firmware.runtime.helpers import In, X, kernel_names, rng_array, run_tool, single_kernel  # noqa: E402


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """Programs written by `kiln compile` (CPU-only ones, and one with a delegate)."""
    out = tmp_path_factory.mktemp("ptes")
    kiln = Path(sys.executable).parent / "kiln"
    made = {}
    for name, model, flags in [
        ("tiny_cnn_cpu", "tiny_cnn", ["--no-delegate"]),
        ("ds_cnn_cpu", "ds_cnn", ["--no-delegate"]),
        ("tiny_cnn_float", "tiny_cnn", ["--no-quantize"]),
        ("tiny_cnn", "tiny_cnn", []),
    ]:
        path = out / f"{name}.pte"
        subprocess.run(
            [str(kiln), "compile", model, "--target", "ethos-u55-128", "--output", str(path), *flags],
            check=True,
            capture_output=True,
        )
        made[name] = path
    return made


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def tensor_summary(plan, index):
    t = plan.values[index]
    return {"type": int(t.scalar_type), "nbytes": t.nbytes, "value": index, "sizes": list(t.sizes)}


# --- Loader ---------------------------------------------------------------------------


def _pte_cases():
    return [
        "tiny_cnn",
        "tiny_cnn_cpu",
        "ds_cnn_cpu",
        "tiny_cnn_float",
        "executorch:conv_relu_arm_delegate_ethos-u55-128.pte",
        "executorch:conv_relu_arm_ethos-u55-128.pte",
    ]


def _pte_path(case: str, programs) -> Path:
    if case.startswith("executorch:"):
        return FIXTURES / case.split(":", 1)[1]
    return programs[case]


@pytest.mark.parametrize("case", _pte_cases())
def test_load_reports_what_kiln_pte_reads(runtime_host, programs, case):
    path = _pte_path(case, programs)
    done = run_tool(runtime_host, "load", path)
    assert done.returncode == 0, done.stdout
    got = json.loads(done.stdout)
    f = deserialize(path.read_bytes())
    plan = f.program.execution_plans[0]
    assert got["values"] == len(plan.values)
    assert got["instructions"] == len(plan.chains[0].instructions)
    assert got["inputs"] == [tensor_summary(plan, i) for i in plan.inputs]
    assert got["outputs"] == [tensor_summary(plan, i) for i in plan.outputs]
    assert got["planned"] == list(plan.non_const_buffer_sizes[1:])
    assert got["operators"] == [[o.name, o.overload] for o in plan.operators]
    assert got["delegates"] == [
        {
            "id": d.id,
            "payload_size": len(f.delegate_payload(d)),
            "payload_fnv": fnv1a(f.delegate_payload(d)),
            "specs": [[s.key, len(s.value), fnv1a(s.value)] for s in d.compile_specs],
        }
        for d in plan.delegates
    ]
    assert got["named"] == [[k, len(v), fnv1a(v), 1] for k, v in f.named().items()]


def _error(done) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout.strip()


# Each line is the whole of what the loader reports: "error 0x<code> " and print_error's line.
@pytest.mark.parametrize(
    "name, corrupt, expected",
    [
        # "ET13" and "ET12" read as little-endian words
        (
            "wrong magic",
            lambda b: b[:4] + b"ET13" + b[8:],
            lambda b: "error 0x101 pte: not an ExecuTorch program (identifier): found 0x33315445, expected 0x32315445",
        ),
        ("too short", lambda b: b[:7], lambda b: "error 0x100 pte: file too short (a=7, b=8)"),
        (
            "root offset past the end",
            lambda b: (0x7FFFFFF0).to_bytes(4, "little") + b[4:],
            lambda b: f"error 0x103 pte: offset or size out of bounds (a={0x7FFFFFF0}, b={_program_size(b)})",
        ),
        (
            "program_size past the end",
            lambda b: b[:16] + (len(b) + 1).to_bytes(8, "little") + b[24:],
            lambda b: f"error 0x102 pte: bad extended header: program_size {len(b) + 1}",
        ),
        (
            "segment base past the end",
            lambda b: b[:24] + (len(b) + 128).to_bytes(8, "little") + b[32:],
            lambda b: f"error 0x102 pte: bad extended header: segment_base_offset {len(b) + 128}",
        ),
        (
            "segment data past the end",
            lambda b: b[:32] + (len(b)).to_bytes(8, "little") + b[40:],
            lambda b: f"error 0x102 pte: bad extended header: segment_data_size {len(b)}",
        ),
    ],
)
def test_corrupted_header_gives_its_error(runtime_host, programs, tmp_path, name, corrupt, expected):
    data = programs["tiny_cnn"].read_bytes()
    assert data[8:12] == b"eh00"
    bad = tmp_path / "bad.pte"
    bad.write_bytes(corrupt(data))
    assert _error(run_tool(runtime_host, "load", bad)) == expected(data)


def _program_size(data: bytes) -> int:
    """The extended header's program_size: the FlatBuffer part's bytes (ExecuTorch's layout)."""
    return int.from_bytes(data[16:24], "little")


def _unchecked_program(monkeypatch, plan_edit) -> bytes:
    """A one-kernel program edited by plan_edit and written without the Python
    writer's own cross-reference checks (it refuses such programs)."""
    monkeypatch.setattr(writer, "check_plan", lambda *args, **kwargs: None)
    data, _ = single_kernel("aten::relu", "out", [In(np.ones((2, 2), np.float32))], (2, 2), plan_edit=plan_edit)
    return data


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            lambda p: dict(
                p,
                chains=[
                    Chain(
                        p["chains"][0].inputs,
                        p["chains"][0].outputs,
                        [KernelCall(5, p["chains"][0].instructions[0].args)],
                    )
                ],
            ),
            "error 0x109 pte: index out of range (a=5, b=1)",
        ),  # operator 5 of 1
        # value 1, the output: 16 bytes at offset 16 (after the 2x2 float input) pass the 20 given
        (
            lambda p: dict(p, non_const_buffer_sizes=[0, 20]),
            "error 0x10a pte: malformed tensor: outside its planned buffer (value 1)",
        ),
        (lambda p: dict(p, outputs=[7]), "error 0x109 pte: index out of range (a=7, b=2)"),  # value 7 of 2
    ],
)
def test_out_of_range_reference_gives_its_error(runtime_host, tmp_path, monkeypatch, edit, expected):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(_unchecked_program(monkeypatch, edit))
    assert _error(run_tool(runtime_host, "load", bad)) == expected


@pytest.mark.parametrize(
    "case, execute",
    [
        ("tiny_cnn", True),
        ("tiny_cnn_float", True),
        ("executorch:conv_relu_arm_delegate_ethos-u55-128.pte", True),
    ],
)
def test_every_truncation_and_byte_flip_ends_in_an_error_or_a_run(runtime_host, programs, case, execute):
    """Every truncation fails to load; every single-byte flip (xor 0x01, 0x80, 0xff)
    either fails with an error code or binds and runs; nothing trips the sanitizers."""
    path = _pte_path(case, programs)
    done = run_tool(runtime_host, "corrupt", path, *(["--execute"] if execute else []))
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = json.loads(done.stdout)
    assert sum(outcomes["truncations"].values()) == path.stat().st_size
    assert "loaded" not in outcomes["truncations"]
    assert sum(outcomes["flips"].values()) == 3 * path.stat().st_size
    assert outcomes["flips"].get("executed", 0) > 0  # flips inside constant data still run


# --- The error model: Result's contract (result.h) and print_error's one line ------------


def test_result_made_from_ok_is_an_internal_error(runtime_host):
    """A Result<int> and a Status made from Error{kOk, 0, 0}: neither is ok, each holds kInternal
    ("<ok> <to_string(code)>" per line)."""
    done = run_tool(runtime_host, "result-from-ok")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "0 internal error: an error made from kOk\n" * 2


# What __builtin_trap executes on the host: ud2 on x86-64 (SIGILL), brk on AArch64 (SIGTRAP).
_TRAP_SIGNALS = {"x86_64": signal.SIGILL, "AMD64": signal.SIGILL, "aarch64": signal.SIGTRAP, "arm64": signal.SIGTRAP}


def test_value_of_a_failed_result_traps(runtime_host):
    """value() of a Result holding Error{kTooLarge, 1, 2} traps: the process dies by the trap's signal
    and never prints the "value %d" line that would follow."""
    assert platform.machine() in _TRAP_SIGNALS, f"no trap signal known for {platform.machine()}"
    done = run_tool(runtime_host, "value-of-error")
    assert done.returncode == -_TRAP_SIGNALS[platform.machine()], (done.returncode, done.stdout + done.stderr)
    assert done.stdout == ""


# One code for each detail enum (its `a`), an out-of-range detail, the values-only kInternal, and
# kNpuTargetMismatch's NPUs: products 0, 1 and 2 by name, any other as its number.
@pytest.mark.parametrize(
    "code, a, b, expected",
    [
        (0x001, 0, 0, "internal error: an error made from kOk"),
        (0x102, 2, 1234, "pte: bad extended header: program_size 1234"),  # HeaderField::kProgramSize
        (0x10C, 7, 2, "pte: unsupported feature: not exactly one chain (2)"),  # Feature::kChains
        (0x10A, 8, 3, "pte: malformed tensor: outside its planned buffer (value 3)"),  # TensorDefect::kOutsideBuffer
        (0x10A, 0, 7, "pte: malformed tensor: unknown tensor defect (value 7)"),  # no TensorDefect 0
        (0x206, 3, 5, "method: bad instruction: jump condition not a bool (instruction 5)"),  # kConditionNotBool
        (0x20D, 5, 2, "method: no such method: index 5 of 2"),  # kMethodNotFound by index (by name: test_methods.py)
        (0x400, 2, 1, "delegate: init failed: scratch too small (delegate 1)"),  # DelegateFault::kScratchTooSmall
        (0x402, 5, 3, "delegate: bad argument: wrong argument count (3)"),  # DelegateFault::kArgumentCount
        # PayloadFault::kNotCop1 with b = "COP2" read little-endian, printed in lower-case hex
        (0x401, 11, 0x32504F43, "delegate: bad payload: cmd_data is not a COP1 command stream (0x32504f43)"),
        # kNpuTargetMismatch: two CONFIG words (product 31..28, log2 MACs 3..0; on the U85 log2 of
        # the SRAM AXI ports 9..8, of the external ports 10)
        (
            0x516,
            0x2000_0118,
            0x0000_1807,
            "stream compiled for another NPU: the delegate was compiled for Ethos-U85 with "
            "256 MACs; this NPU is an Ethos-U55 with 128 MACs",
        ),
        (
            0x516,
            0x1000_3008,
            0x2000_261B,
            "stream compiled for another NPU: the delegate was compiled for Ethos-U65 with "
            "256 MACs; this NPU is an Ethos-U85 with 2048 MACs",
        ),
        (
            0x516,
            0x7000_0005,
            0x0000_1807,
            "stream compiled for another NPU: the delegate was compiled for product 7 with "
            "32 MACs; this NPU is an Ethos-U55 with 128 MACs",
        ),
        (
            0x516,
            0x0000_1807,
            0xF000_0000,
            "stream compiled for another NPU: the delegate was compiled for Ethos-U55 with "
            "128 MACs; this NPU is an NPU of product 15 with 1 MACs",
        ),
        # same family and MACs: the U85's AXI ports are what differ, so both are named
        (
            0x516,
            0x2000_0118,
            0x2000_0518,
            "stream compiled for another NPU: the delegate was compiled for Ethos-U85 with "
            "256 MACs (2 SRAM and 1 external AXI ports); this NPU is an Ethos-U85 with 256 "
            "MACs (2 SRAM and 2 external AXI ports)",
        ),
        # STATUS bit names: bit 7 the U55/U65's wd_fault, bit 9 the U85's branch_fault
        (0x521, 0x282, 8, "NPU fault: STATUS=0x00000282 (irq_raised, wd_fault, branch_fault), QREAD=8"),
        (
            0x531,
            10,
            12,
            "NPU stream accesses memory outside its region's buffer: weight read (core 2) of the operation at word 12",
        ),
    ],
)
def test_print_error_writes_one_line(runtime_host, code, a, b, expected):
    done = run_tool(runtime_host, "print-error", hex(code), a, b)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == expected + "\n"


# --- Executor -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case", ["tiny_cnn_cpu", "ds_cnn_cpu", "tiny_cnn_float", "executorch:conv_relu_arm_ethos-u55-128.pte"]
)
def test_cpu_program_equals_run_host_bit_for_bit(runtime_host, programs, tmp_path, case):
    path = _pte_path(case, programs)
    f = deserialize(path.read_bytes())
    plan = f.program.execution_plans[0]
    rng = np.random.default_rng(5)
    paths, inputs = [], []
    for n, i in enumerate(plan.inputs):
        t = plan.values[i]
        x = (rng.standard_normal(t.sizes) * 2).astype(NUMPY_DTYPES[t.scalar_type])
        inputs.append(x)
        paths.append(tmp_path / f"in{n}.bin")
        x.tofile(paths[-1])
    done = run_tool(runtime_host, "run", path, tmp_path, *paths)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = host.run(path.read_bytes(), inputs)
    for n, e in enumerate(expected):
        assert (tmp_path / f"output_{n}.bin").read_bytes() == np.ascontiguousarray(e).tobytes()


class _Promoting(torch.nn.Module):
    """Ops of integer and bool tensors: operands converted as PyTorch promotes them (sigmoid and
    true division of int8, a bool compared with 2 and clamped by ints), bool arithmetic and a
    logical op of int8s."""

    def forward(self, i, b):
        return torch.sigmoid(i), i / (i.abs() + 1), b == 2, torch.clamp(b, -3, 3), b + b, torch.logical_and(i, i - 3)


def test_program_with_converted_operands_equals_run_host_bit_for_bit(runtime_host, tmp_path):
    i = torch.arange(-12, 12, dtype=torch.int8).reshape(4, 6)
    b = i % 3 == 0
    result = kc.compile_model(
        LoadedModel("promoting", _Promoting().eval(), (i, b)),
        CompileSpec("ethos-u55-128", quantize=False),
        log=lambda line: None,
    )
    assert ("aten::_to_copy", "out") in result.program.operators
    path, inputs = tmp_path / "promoting.pte", [i.numpy(), b.numpy()]
    path.write_bytes(result.pte)
    for n, x in enumerate(inputs):
        x.tofile(tmp_path / f"in{n}.bin")
    done = run_tool(runtime_host, "run", path, tmp_path, tmp_path / "in0.bin", tmp_path / "in1.bin")
    assert done.returncode == 0, done.stdout + done.stderr
    expected = host.run(result.pte, inputs)
    assert len(expected) == 6
    for n, e in enumerate(expected):
        assert (tmp_path / f"output_{n}.bin").read_bytes() == np.ascontiguousarray(e).tobytes()


# --- Kernels, one per program, against kiln.program.kernels through `kiln run-host` ------------


def test_every_kiln_kernel_is_in_the_table_and_its_family_tested():
    """Each kernel is in the runtime's kernel table (the host build links every table entry, so
    a kernel without its C++ function fails the build), and each family of kiln.program.kernels
    has its test_kernels_<family>.py, whose test_every_<family>_kernel_has_a_case checks it
    has a case for each of the family's kernels."""
    assert set(by_name()) == set(gen_kernel_table.KERNELS)
    families = (*kernels.FAMILIES, kernels.integer, kernels.integer_s16)  # the integer kernels besides the families
    assert set().union(*(kernel_names(family) for family in families)) == set(by_name())
    here = Path(__file__).parent
    untested = [
        f.__name__ for f in families if not (here / f"test_kernels_{f.__name__.rpartition('.')[2]}.py").is_file()
    ]
    assert not untested, untested


def test_kernel_with_wrong_shapes_is_an_error_not_a_fault(runtime_host, tmp_path):
    data, arrays = single_kernel(
        "aten::linear", "out", [In(rng_array((3, 17), 7)), rng_array((5, 16), 8), None], (3, 5)
    )
    path = tmp_path / "bad.pte"
    path.write_bytes(data)
    arrays[0].tofile(tmp_path / "in0.bin")
    # argument 1, the weight: 16 features against the input's 17
    assert (
        _error(run_tool(runtime_host, "run", path, tmp_path, tmp_path / "in0.bin"))
        == "error 0x301 kernel: shape mismatch (a=1, b=0)"
    )


# --- Selective build generator ----------------------------------------------------------


def test_kernel_table_names_only_the_given_kernels(tmp_path):
    out = tmp_path / "table.cpp"
    assert gen_kernel_table.main(["--output", str(out), "aten::relu.out", "cortex_m::quantize_per_tensor.out"]) == 0
    text = out.read_text()
    assert '{"aten::relu", "out", &kernels::relu_out}' in text
    assert '{"cortex_m::quantize_per_tensor", "out", &kernels::cortex_m_quantize_per_tensor_out}' in text
    assert "convolution_out" not in text


def test_kernel_table_fails_naming_an_operator_kiln_lacks(tmp_path, capsys):
    data, _ = single_kernel("aten::special_bessel_j0", "out", [In(X)], X.shape)
    (tmp_path / "bessel.pte").write_bytes(data)
    assert gen_kernel_table.main(["--output", str(tmp_path / "t.cpp"), "--pte", str(tmp_path / "bessel.pte")]) == 1
    assert "kiln's runtime has no CPU kernel for aten::special_bessel_j0.out" in capsys.readouterr().err
    assert not (tmp_path / "t.cpp").exists()
