"""kiln's runtime core built for the host under AddressSanitizer and UBSan.

References independent of the C++ code: kiln.pte.schema (the Python reader) for what the
loader reports, `kiln run-host` (kiln.reference.run_host over kiln.program.kernels' numpy) for what the
executor and kernels compute, and hand-made corruptions for the loader's errors.
"""

from __future__ import annotations

import json
import platform
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kiln.reference import run_host as host
from kiln.pte import schema as pte
from kiln.program.kernels import by_name

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
sys.path.insert(0, str(ROOT / "firmware" / "runtime"))
import gen_kernel_table  # noqa: E402


@pytest.fixture(scope="module")
def runtime_host(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("runtime-host")
    subprocess.run(["cmake", "-S", str(ROOT / "tests" / "firmware" / "runtime"), "-B", str(build), "-G", "Ninja",
                    f"-DKILN_PYTHON={sys.executable}"], check=True, capture_output=True)
    done = subprocess.run(["ninja", "-C", str(build)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return build / "runtime_host"


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """Programs written by `kiln compile` (CPU-only ones, and one with a delegate)."""
    out = tmp_path_factory.mktemp("ptes")
    kiln = Path(sys.executable).parent / "kiln"
    made = {}
    for name, model, flags in [("tiny_cnn_cpu", "tiny_cnn", ["--no-delegate"]),
                               ("ds_cnn_cpu", "ds_cnn", ["--no-delegate"]),
                               ("tiny_cnn_float", "tiny_cnn", ["--no-quantize"]),
                               ("tiny_cnn", "tiny_cnn", [])]:
        path = out / f"{name}.pte"
        subprocess.run([str(kiln), "compile", model, "--target", "ethos-u55-128", "--output", str(path),
                        *flags], check=True, capture_output=True)
        made[name] = path
    return made


def run_tool(tool: Path, *args) -> subprocess.CompletedProcess:
    done = subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert "runtime error" not in done.stderr and "AddressSanitizer" not in done.stderr, done.stderr
    return done


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
    return ["tiny_cnn", "tiny_cnn_cpu", "ds_cnn_cpu", "tiny_cnn_float",
            "executorch:conv_relu_arm_delegate_ethos-u55-128.pte",
            "executorch:conv_relu_arm_ethos-u55-128.pte"]


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
    f = pte.deserialize(path.read_bytes())
    plan = f.program.execution_plans[0]
    assert got["values"] == len(plan.values)
    assert got["instructions"] == len(plan.chains[0].instructions)
    assert got["inputs"] == [tensor_summary(plan, i) for i in plan.inputs]
    assert got["outputs"] == [tensor_summary(plan, i) for i in plan.outputs]
    assert got["planned"] == list(plan.non_const_buffer_sizes[1:])
    assert got["operators"] == [[o.name, o.overload] for o in plan.operators]
    assert got["delegates"] == [
        {"id": d.id, "payload_size": len(f.delegate_payload(d)), "payload_fnv": fnv1a(f.delegate_payload(d)),
         "specs": [[s.key, len(s.value), fnv1a(s.value)] for s in d.compile_specs]}
        for d in plan.delegates]
    assert got["named"] == [[k, len(v), fnv1a(v), 1] for k, v in f.named().items()]


def _error(done) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout.strip()


# Each line is the whole of what the loader reports: "error 0x<code> " and print_error's line.
@pytest.mark.parametrize("name, corrupt, expected", [
    # "ET13" and "ET12" read as little-endian words
    ("wrong magic", lambda b: b[:4] + b"ET13" + b[8:],
     lambda b: "error 0x101 pte: not an ExecuTorch program (identifier): found 0x33315445, expected 0x32315445"),
    ("too short", lambda b: b[:7], lambda b: "error 0x100 pte: file too short (a=7, b=8)"),
    ("root offset past the end", lambda b: (0x7FFFFFF0).to_bytes(4, "little") + b[4:],
     lambda b: f"error 0x103 pte: offset or size out of bounds (a={0x7FFFFFF0}, b={_program_size(b)})"),
    ("program_size past the end", lambda b: b[:16] + (len(b) + 1).to_bytes(8, "little") + b[24:],
     lambda b: f"error 0x102 pte: bad extended header: program_size {len(b) + 1}"),
    ("segment base past the end", lambda b: b[:24] + (len(b) + 128).to_bytes(8, "little") + b[32:],
     lambda b: f"error 0x102 pte: bad extended header: segment_base_offset {len(b) + 128}"),
    ("segment data past the end", lambda b: b[:32] + (len(b)).to_bytes(8, "little") + b[40:],
     lambda b: f"error 0x102 pte: bad extended header: segment_data_size {len(b)}"),
])
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
    monkeypatch.setattr(pte, "_check_plan", lambda *args, **kwargs: None)
    data, _ = _single_kernel("aten::relu", "out", [_In(np.ones((2, 2), np.float32))], (2, 2),
                             plan_edit=plan_edit)
    return data


@pytest.mark.parametrize("edit, expected", [
    (lambda p: dict(p, chains=[pte.Chain(p["chains"][0].inputs, p["chains"][0].outputs,
                                         [pte.KernelCall(5, p["chains"][0].instructions[0].args)])]),
     "error 0x109 pte: index out of range (a=5, b=1)"),  # operator 5 of 1
    # value 1, the output: 16 bytes at offset 16 (after the 2x2 float input) pass the 20 given
    (lambda p: dict(p, non_const_buffer_sizes=[0, 20]),
     "error 0x10a pte: malformed tensor: outside its planned buffer (value 1)"),
    (lambda p: dict(p, outputs=[7]), "error 0x109 pte: index out of range (a=7, b=2)"),  # value 7 of 2
])
def test_out_of_range_reference_gives_its_error(runtime_host, tmp_path, monkeypatch, edit, expected):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(_unchecked_program(monkeypatch, edit))
    assert _error(run_tool(runtime_host, "load", bad)) == expected


@pytest.mark.parametrize("case, execute", [
    ("tiny_cnn", True), ("tiny_cnn_float", True),
    ("executorch:conv_relu_arm_delegate_ethos-u55-128.pte", True),
])
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
# kNpuProductMismatch's products: 0 and 1 by name, any other as its number.
@pytest.mark.parametrize("code, a, b, expected", [
    (0x001, 0, 0, "internal error: an error made from kOk"),
    (0x102, 2, 1234, "pte: bad extended header: program_size 1234"),  # HeaderField::kProgramSize
    (0x10C, 7, 2, "pte: unsupported feature: not exactly one chain (2)"),  # Feature::kChains
    (0x10A, 8, 3, "pte: malformed tensor: outside its planned buffer (value 3)"),  # TensorDefect::kOutsideBuffer
    (0x10A, 0, 7, "pte: malformed tensor: unknown tensor defect (value 7)"),  # no TensorDefect 0
    (0x206, 3, 5, "method: bad instruction: jump condition not a bool (instruction 5)"),  # kConditionNotBool
    (0x400, 2, 1, "delegate: init failed: scratch too small (delegate 1)"),  # DelegateFault::kScratchTooSmall
    (0x402, 5, 3, "delegate: bad argument: wrong argument count (3)"),  # DelegateFault::kArgumentCount
    # PayloadFault::kNotCop1 with b = "COP2" read little-endian, printed in lower-case hex
    (0x401, 11, 0x32504F43, "delegate: bad payload: cmd_data is not a COP1 command stream (0x32504f43)"),
    (0x511, 1, 0, "stream compiled for another NPU product: stream Ethos-U65, NPU Ethos-U55"),
    (0x511, 7, 0, "stream compiled for another NPU product: stream product 7, NPU Ethos-U55"),
    (0x511, 0, 4294967295, "stream compiled for another NPU product: stream Ethos-U55, NPU product 4294967295"),
])
def test_print_error_writes_one_line(runtime_host, code, a, b, expected):
    done = run_tool(runtime_host, "print-error", hex(code), a, b)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == expected + "\n"


# --- Executor -------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["tiny_cnn_cpu", "ds_cnn_cpu", "tiny_cnn_float",
                                  "executorch:conv_relu_arm_ethos-u55-128.pte"])
def test_cpu_program_equals_run_host_bit_for_bit(runtime_host, programs, tmp_path, case):
    path = _pte_path(case, programs)
    f = pte.deserialize(path.read_bytes())
    plan = f.program.execution_plans[0]
    rng = np.random.default_rng(5)
    paths, inputs = [], []
    for n, i in enumerate(plan.inputs):
        t = plan.values[i]
        x = (rng.standard_normal(t.sizes) * 2).astype(pte.NUMPY_DTYPES[t.scalar_type])
        inputs.append(x)
        paths.append(tmp_path / f"in{n}.bin")
        x.tofile(paths[-1])
    done = run_tool(runtime_host, "run", path, tmp_path, *paths)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = host.run(path.read_bytes(), inputs)
    for n, e in enumerate(expected):
        assert (tmp_path / f"output_{n}.bin").read_bytes() == np.ascontiguousarray(e).tobytes()


# --- Kernels, one per program, against kiln.program.kernels through `kiln run-host` ------------

class _In:
    """A tensor the program takes as an input (planned memory)."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)


class _Doubles(tuple):
    """A DoubleList argument."""


def _single_kernel(name, overload, args, out_shape, out_dtype=np.float32, plan_edit=None):
    """A program of one KernelCall: tensors as planned inputs (_In) or constants
    (arrays), scalars, int lists, double lists; returns (bytes, input arrays)."""
    values, constants, inputs, arg_indices, arrays = [], [], [], [], []
    planned: list[tuple[int, int]] = []  # (value index, nbytes)

    def scalar_type(dtype):
        return pte.SCALAR_TYPES[np.dtype(dtype).name]

    def add(v):
        values.append(v)
        return len(values) - 1

    def planned_tensor(shape, dtype):
        t = dict(scalar_type=scalar_type(dtype), sizes=list(shape), dim_order=list(range(len(shape))))
        planned.append((len(values), int(np.prod(shape)) * np.dtype(dtype).itemsize))
        return add(t)  # completed below, once offsets are known

    for a in args:
        if isinstance(a, _In):
            index = planned_tensor(a.array.shape, a.array.dtype)
            inputs.append(index)
            arrays.append(a.array)
        elif isinstance(a, np.ndarray):
            constants.append(np.ascontiguousarray(a).tobytes())
            index = add(pte.Tensor(scalar_type=scalar_type(a.dtype), sizes=list(a.shape),
                                   dim_order=list(range(a.ndim)), data_buffer_idx=len(constants)))
        elif a is None:
            index = add(pte.Null())
        elif isinstance(a, bool):
            index = add(pte.Bool(a))
        elif isinstance(a, int):
            index = add(pte.Int(a))
        elif isinstance(a, float):
            index = add(pte.Double(a))
        elif isinstance(a, _Doubles):
            index = add(pte.DoubleList(list(a)))
        else:
            items = [add(pte.Int(int(i))) for i in a]
            index = add(pte.IntList(items))
        arg_indices.append(index)
    out = planned_tensor(out_shape, out_dtype)
    offset = 0
    for index, nbytes in planned:
        values[index] = pte.Tensor(**values[index], allocation_info=pte.AllocationInfo.at(1, offset))
        offset += -(-nbytes // 16) * 16
    call = pte.KernelCall(0, arg_indices + [out, out])
    fields = dict(name="forward", values=values, inputs=inputs, outputs=[out],
                  chains=[pte.Chain(inputs, [out], [call])], operators=[pte.Operator(name, overload)],
                  delegates=[], non_const_buffer_sizes=[0, max(offset, 16)])
    if plan_edit is not None:
        fields = plan_edit(fields)
    plan = pte.ExecutionPlan(**fields)
    return pte.serialize(pte.PteProgram([plan]), constants=constants), arrays


def _rng_array(shape, seed, scale=2.0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


_X = _rng_array((2, 4, 7, 6), 1)
_SPECIAL = np.array([[0.0, -0.0, 1.5, -1.5], [np.nan, np.inf, -np.inf, 3.0e-39]], np.float32)

KERNEL_CASES = {
    "quantize": ("cortex_m::quantize_per_tensor", "out",
                 [_In(_rng_array((3, 50), 2, 40)), 0.37, -3, -128, 127, 1], (3, 50), np.int8),
    "quantize_int16": ("cortex_m::quantize_per_tensor", "out",
                       [_In(_rng_array((64,), 3, 900)), 0.021, 5, -32768, 32767, 2], (64,), np.int16),
    "dequantize": ("cortex_m::dequantize_per_tensor", "out",
                   [_In(np.arange(-128, 128, dtype=np.int8)), 0.0731, 7, -128, 127, 1], (256,), np.float32),
    "dequantize_per_channel": (  # weights as ExecuTorch's Arm flow dequantizes them: int8, axis 0
        "quantized_decomposed::dequantize_per_channel", "out",
        [_In(np.arange(-128, 128, dtype=np.int8).reshape(4, 1, 8, 8)), np.array([0.5, 0.013, 2.0e-5, 3.0], np.float32),
         np.array([0, -3, 127, 5], np.int64), 0, -127, 127, 1, None], (4, 1, 8, 8)),
    "dequantize_per_channel_int32": (  # a bias beyond float32's 24 bits; no zero points; axis 1
        "quantized_decomposed::dequantize_per_channel", "out",
        [_In(np.array([[1, -(2**31) + 1, 2**31 - 1], [16_777_217, -5, 0]], np.int32).reshape(1, 2, 3)),
         np.array([1.5e-4, 7.0], np.float32), None, 1, -(2**31) + 1, 2**31 - 1, 3, 6], (1, 2, 3)),
    "dequantize_per_channel_int32_long_zp": (  # int64 zero points: the difference does not wrap
        "quantized_decomposed::dequantize_per_channel", "out",
        [_In(np.array([-(2**31) + 1, 2**31 - 1, 7], np.int32)), np.array([1.0, 0.5, 3.0], np.float32),
         np.array([5, -5, 2**31 - 1], np.int64), 0, -(2**31) + 1, 2**31 - 1, 3, None], (3,)),
    "avg_pool2d": ("aten::avg_pool2d", "out", [_In(_X), [3, 3], [2, 2], [1, 1], False, True, None],
                   (2, 4, 4, 3)),
    "avg_pool2d_global": ("aten::avg_pool2d", "out", [_In(_X), [7, 6], [], [0, 0], False, True, None],
                          (2, 4, 1, 1)),
    "conv_groups": ("aten::convolution", "out",
                    [_In(_X), _rng_array((6, 2, 3, 3), 4), _rng_array((6,), 5), [2, 2], [1, 1], [1, 1], False,
                     [0, 0], 2], (2, 6, 4, 3)),
    "conv_dilated_no_bias": ("aten::convolution", "out",
                             [_In(_X), _rng_array((3, 4, 2, 3), 6), None, [1, 1], [2, 1], [2, 2], False,
                              [0, 0], 1], (2, 3, 9, 4)),
    "linear": ("aten::linear", "out", [_In(_rng_array((3, 17), 7)), _rng_array((5, 17), 8),
                                       _rng_array((5,), 9)], (3, 5)),
    "linear_no_bias": ("aten::linear", "out", [_In(_rng_array((2, 2, 9), 7)), _rng_array((4, 9), 8), None],
                       (2, 2, 4)),
    "view_copy": ("aten::view_copy", "out", [_In(_X), [2, 168]], (2, 168)),
    "mean": ("aten::mean", "out", [_In(_X), [2, 3], True, None], (2, 4, 1, 1)),
    "relu": ("aten::relu", "out", [_In(_SPECIAL)], (2, 4)),
    "relu_random": ("aten::relu", "out", [_In(_X)], _X.shape),
    "hardtanh": ("aten::hardtanh", "out", [_In(_SPECIAL), -1.0, 2.5], (2, 4)),
    "add_broadcast": ("aten::add", "out", [_In(_rng_array((1, 3, 1, 4), 10)), _In(_rng_array((2, 1, 5, 4), 11)),
                                           1], (2, 3, 5, 4)),
    "sub_scalar": ("aten::sub", "out", [_In(_X), 0.3, None], _X.shape),
    "mul_broadcast": ("aten::mul", "out", [_In(_rng_array((4, 1), 12)), _In(_rng_array((3,), 13))], (4, 3)),
    "reciprocal": ("aten::reciprocal", "out", [_In(_X)], _X.shape),
    "amax": ("aten::amax", "out", [_In(_X), [1, 3], False], (2, 7)),
    "sum": ("aten::sum", "IntList_out", [_In(_X), [-1], True, None], (2, 4, 7, 1)),
    "upsample": ("aten::upsample_bilinear2d", "vec_out", [_In(_X), [11, 13], False, None], (2, 4, 11, 13)),
    "upsample_corners": ("aten::upsample_bilinear2d", "vec_out", [_In(_X), [14, 5], True, None], (2, 4, 14, 5)),
    "upsample_scales": ("aten::upsample_bilinear2d", "vec_out", [_In(_X), None, False, _Doubles((2.0, 1.5))],
                        (2, 4, 14, 9)),
    # exp/log/tanh in float64 rounded once to float32 on both sides (kiln.program.kernels)
    "exp": ("aten::exp", "out", [_In(_X)], _X.shape),
    "log": ("aten::log", "out", [_In(np.abs(_X) + np.float32(0.01))], _X.shape),
    "tanh": ("aten::tanh", "out", [_In(_X)], _X.shape),
    "sigmoid": ("aten::sigmoid", "out", [_In(_X)], _X.shape),
    "softmax": ("aten::_softmax", "out", [_In(_X), 1, False], _X.shape),
    "log_softmax": ("aten::_log_softmax", "out", [_In(_X), -1, False], _X.shape),
}


def _run_kernel(runtime_host, tmp_path, case):
    name, overload, args, out_shape, *dtype = case
    data, arrays = _single_kernel(name, overload, args, out_shape, *dtype)
    path = tmp_path / "kernel.pte"
    path.write_bytes(data)
    paths = []
    for n, a in enumerate(arrays):
        paths.append(tmp_path / f"in{n}.bin")
        a.tofile(paths[-1])
    done = run_tool(runtime_host, "run", path, tmp_path, *paths)
    assert done.returncode == 0, done.stdout + done.stderr
    (expected,) = host.run(data, arrays)
    got = np.frombuffer((tmp_path / "output_0.bin").read_bytes(), expected.dtype).reshape(expected.shape)
    return got, expected


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = _run_kernel(runtime_host, tmp_path, KERNEL_CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


@pytest.mark.parametrize("case", ["dequantize_per_channel", "dequantize_per_channel_int32",
                                  "dequantize_per_channel_int32_long_zp"])
def test_dequantize_per_channel_equals_pytorch(case):
    """kiln.program.kernels' semantics against PyTorch's own quantized_decomposed operator."""
    import torch
    from torch.ao.quantization.fx import _decomposed  # noqa: F401 (registers quantized_decomposed)

    q, scales, zero_points, axis, qmin, qmax, dtype, out_dtype = KERNEL_CASES[case][2]
    torch_dtype = {1: torch.int8, 3: torch.int32}[dtype]
    expected = torch.ops.quantized_decomposed.dequantize_per_channel(
        torch.from_numpy(q.array), torch.from_numpy(scales),
        None if zero_points is None else torch.from_numpy(zero_points), axis, qmin, qmax, torch_dtype).numpy()
    got = by_name()[("quantized_decomposed::dequantize_per_channel", "out")].run(
        q.array, scales, zero_points, axis, qmin, qmax, dtype, out_dtype)
    assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()


def test_every_kiln_kernel_is_tested_and_in_the_table():
    tested = {(c[0], c[1]) for c in KERNEL_CASES.values()}
    assert set(by_name()) == set(gen_kernel_table.KERNELS) == tested


def test_kernel_with_wrong_shapes_is_an_error_not_a_fault(runtime_host, tmp_path):
    data, arrays = _single_kernel("aten::linear", "out", [_In(_rng_array((3, 17), 7)), _rng_array((5, 16), 8), None],
                                  (3, 5))
    path = tmp_path / "bad.pte"
    path.write_bytes(data)
    arrays[0].tofile(tmp_path / "in0.bin")
    # argument 1, the weight: 16 features against the input's 17
    assert _error(run_tool(runtime_host, "run", path, tmp_path, tmp_path / "in0.bin")) == \
        "error 0x301 kernel: shape mismatch (a=1, b=0)"


# --- Selective build generator ----------------------------------------------------------

def test_kernel_table_names_only_the_given_kernels(tmp_path):
    out = tmp_path / "table.cpp"
    assert gen_kernel_table.main(["--output", str(out), "aten::relu.out", "cortex_m::quantize_per_tensor.out"]) == 0
    text = out.read_text()
    assert '{"aten::relu", "out", &kernels::relu_out}' in text
    assert "quantize_per_tensor_out" in text and "convolution_out" not in text


def test_kernel_table_fails_naming_an_operator_kiln_lacks(tmp_path, capsys):
    data, _ = _single_kernel("aten::gelu", "out", [_In(_X)], _X.shape)
    (tmp_path / "gelu.pte").write_bytes(data)
    assert gen_kernel_table.main(["--output", str(tmp_path / "t.cpp"), "--pte", str(tmp_path / "gelu.pte")]) == 1
    assert "kiln's runtime has no CPU kernel for aten::gelu.out" in capsys.readouterr().err
    assert not (tmp_path / "t.cpp").exists()
