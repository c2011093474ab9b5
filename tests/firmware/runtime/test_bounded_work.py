"""Hostile programs against the runtime's bounds (issue 14): method set-up linear in the
program, no loops, a work budget per execute(), every output with memory, and kernels that
never overflow on integers taken from the program. Each program is built here, byte for byte
through kiln.pte.writer, and run by the host build under AddressSanitizer and UBSan.

Expected lines are print_error's text for the error named in kiln/runtime/error.h; work
figures are worked out here from the program's own values (the rule method.h states)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kiln.pte.reader import deserialize
from kiln.pte.schema import (
    SCALAR_TYPES,
    Bool,
    Chain,
    DelegateCall,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    OptionalTensorList,
    String,
    Tensor,
    TensorList,
)
from tests.firmware.runtime.helpers import In, Outs, Tensors, run_tool, single_kernel

ROOT = Path(__file__).resolve().parents[3]
CPU_FIXTURE = ROOT / "tests" / "fixtures" / "executorch" / "conv_relu_arm_ethos-u55-128.pte"


def _relu(plan_edit=None) -> bytes:
    """aten::relu.out on a 2x2 float input: value 0 the input, value 1 the output."""
    data, _ = single_kernel("aten::relu", "out", [In(np.ones((2, 2), np.float32))], (2, 2), plan_edit=plan_edit)
    return data


def _run(runtime_host, tmp_path, data: bytes, *options, inputs=None):
    """Loads, binds and runs `data` with inputs of zeros for each program input (or `inputs`)."""
    path = tmp_path / "program.pte"
    path.write_bytes(data)
    plan = deserialize(data).program.execution_plans[0]
    files = []
    for n, index in enumerate(plan.inputs if inputs is None else []):
        files.append(tmp_path / f"in{n}.bin")
        files[-1].write_bytes(bytes(plan.values[index].nbytes))
    for n, array in enumerate(inputs or []):
        files.append(tmp_path / f"in{n}.bin")
        array.tofile(files[-1])
    return run_tool(runtime_host, "run", *options, path, tmp_path, *files)


def _error(done) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout.strip()


# --- Program inputs and outputs: each listed once, each output with memory ------------------


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda p: dict(p, inputs=[0, 0]), "value 0 (inputs)"),
        (lambda p: dict(p, outputs=[1, 1]), "value 1 (outputs)"),
        # 1,000 times each: what made Method::create quadratic (inputs x outputs); a 30,000-byte
        # string value pads the FlatBuffer so that the loader's work budget (8 reads a byte)
        # covers reading the 2,000 entries' tensors
        (
            lambda p: dict(p, values=[*p["values"], String("x" * 30000)], inputs=[0] * 1000, outputs=[1] * 1000),
            "value 0 (inputs)",
        ),
    ],
)
def test_value_listed_twice_as_input_or_output_is_refused(runtime_host, tmp_path, edit, expected):
    done = _run(runtime_host, tmp_path, _relu(edit), inputs=[np.zeros((2, 2), np.float32)])
    assert _error(done) == "error 0x20a method: a value listed twice as a program input or output: " + expected


def test_value_both_input_and_output_is_allowed(runtime_host, tmp_path):
    """An input that is also an output (listed once each) is a valid program: it binds and runs."""
    done = _run(runtime_host, tmp_path, _relu(lambda p: dict(p, outputs=[1, 0])))
    assert done.returncode == 0, done.stdout + done.stderr


def test_output_without_memory_is_refused(runtime_host, tmp_path):
    """A plan output with neither planned memory nor constant data (value 2, output 1): create
    refuses it, so nothing reads its null data after execute()."""

    def edit(p):
        bare = Tensor(scalar_type=SCALAR_TYPES["float32"], sizes=[4], dim_order=[0])
        return dict(p, values=[*p["values"], bare], outputs=[*p["outputs"], len(p["values"])])

    assert (
        _error(_run(runtime_host, tmp_path, _relu(edit)))
        == "error 0x20b method: program output without memory: output 1 (value 2)"
    )


def test_empty_output_without_memory_is_allowed(runtime_host, tmp_path):
    """An output of no bytes needs no memory."""

    def edit(p):
        empty = Tensor(scalar_type=SCALAR_TYPES["float32"], sizes=[0], dim_order=[0])
        return dict(p, values=[*p["values"], empty], outputs=[*p["outputs"], len(p["values"])])

    done = _run(runtime_host, tmp_path, _relu(edit))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "output_1.bin").read_bytes() == b""


def _moving(source):
    """A chain of one MoveCall from value `source` into the output (value 1); value 2 is a
    2x2 float tensor without memory."""

    def edit(p):
        bare = Tensor(scalar_type=SCALAR_TYPES["float32"], sizes=[2, 2], dim_order=[0, 1])
        chain = p["chains"][0]
        return dict(p, values=[*p["values"], bare], chains=[Chain(chain.inputs, chain.outputs, [MoveCall(source, 1)])])

    return edit


def test_move_of_a_tensor_without_memory_is_refused(runtime_host, tmp_path):
    """A move would leave the output (value 1) without memory: execute() refuses it."""
    assert (
        _error(_run(runtime_host, tmp_path, _relu(_moving(2)))) == "error 0x207 method: tensor has no data (a=2, b=0)"
    )


def test_move_of_a_planned_tensor_into_an_output(runtime_host, tmp_path):
    """A move takes the tensor with its memory: the output reads the input's bytes."""
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    done = _run(runtime_host, tmp_path, _relu(_moving(0)), inputs=[x])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "output_0.bin").read_bytes() == x.tobytes()


# --- Jumps go forward ------------------------------------------------------------------------


def _with_jump(destination: int, position: int):
    """The relu call and a JumpFalseCall on a false Bool (value 2) to `destination`, at `position`."""

    def edit(p):
        chain = p["chains"][0]
        instructions = list(chain.instructions)
        instructions.insert(position, JumpFalseCall(len(p["values"]), destination))
        return dict(p, values=[*p["values"], Bool(False)], chains=[Chain(chain.inputs, chain.outputs, instructions)])

    return edit


@pytest.mark.parametrize("destination, position", [(0, 1), (1, 1)])  # back over the kernel; to itself
def test_backward_jump_is_refused_at_load(runtime_host, tmp_path, destination, position):
    path = tmp_path / "loop.pte"
    path.write_bytes(_relu(_with_jump(destination, position)))
    assert (
        _error(run_tool(runtime_host, "load", path))
        == "error 0x10c pte: unsupported feature: a jump backwards (a loop) (1)"
    )


def test_forward_jump_skips_its_instructions(runtime_host, tmp_path):
    """A jump at 0 on false to 2 (the end) skips the relu: the output keeps the zeros of its
    planned buffer, and the run charges the jump alone (1 element)."""
    done = _run(runtime_host, tmp_path, _relu(_with_jump(2, 0)), inputs=[np.full((2, 2), 3.0, np.float32)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "output_0.bin").read_bytes() == bytes(16)
    # work_per_run counts every instruction: the jump (1) and the relu (1 + 4 + 4 + 4)
    assert done.stdout.split()[-1] == "work_per_run=14"


# --- The work budget --------------------------------------------------------------------------


def _work_per_run(plan) -> int:
    """method.h's charge: per instruction 1, plus the numel of each tensor argument and the item
    count of each tensor list argument of a kernel or delegate call."""
    total = 0
    for ins in plan.chains[0].instructions:
        total += 1
        if isinstance(ins, (KernelCall, DelegateCall)):
            for a in ins.args:
                v = plan.values[a]
                if isinstance(v, Tensor):
                    total += math.prod(v.sizes)
                elif isinstance(v, (TensorList, OptionalTensorList)):
                    total += len(v.items)
    return total


def test_work_budget_stops_a_real_program(runtime_host, tmp_path):
    """ExecuTorch's conv+relu program (CPU kernels): it runs with the runner's default budget
    and with exactly its work per run; one element less stops it before its last instruction,
    a budget of 1 before its first."""
    data = CPU_FIXTURE.read_bytes()
    plan = deserialize(data).program.execution_plans[0]
    work, last = _work_per_run(plan), len(plan.chains[0].instructions) - 1
    assert last > 0 and work > 1000
    default = _run(runtime_host, tmp_path, data)
    assert default.returncode == 0, default.stdout + default.stderr
    assert default.stdout.split()[-1] == f"work_per_run={work}"
    exact = _run(runtime_host, tmp_path, data, f"--work-budget={work}")
    assert exact.returncode == 0, exact.stdout + exact.stderr
    assert (
        _error(_run(runtime_host, tmp_path, data, f"--work-budget={work - 1}"))
        == f"error 0x20c method: work budget exhausted: instruction {last} would pass the budget of {work - 1} elements"
    )
    assert (
        _error(_run(runtime_host, tmp_path, data, "--work-budget=1"))
        == "error 0x20c method: work budget exhausted: instruction 0 would pass the budget of 1 elements"
    )


# --- Integers from the program in the kernels ------------------------------------------------


class _Empty:
    """A program input with no elements whose other sizes are any int32 (numpy refuses such shapes)."""

    def __init__(self, shape, dtype=np.float32):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)

    def tofile(self, path):
        Path(path).write_bytes(b"")


def _empty(shape, dtype=np.float32) -> In:
    made = In(np.zeros(0, dtype))
    made.array = _Empty(shape, dtype)
    return made


B = 2**31 - 1  # the largest size a .pte can give; a tensor of 0 elements may have several

# Each: a kernel call on tensors of no elements with the largest sizes, whose sizes' products
# pass int64, and what the call gives: "ok" (nothing to do, as PyTorch) or its error line.
# Before the checked helpers, index_select, cat, constant_pad_nd, flip, select_copy and
# upsample_nearest2d overflowed a signed product here (UBSan); the others guard the same
# kind of arithmetic by range checks or unsigned element counts.
EMPTY_CASES = {
    "index_select": (
        ("aten::index_select", "out", [_empty((0, B, B, B, B)), 0, np.array([], np.int64)], (0, B, B, B, B)),
        "ok",
    ),
    "index_select_out_of_range": (
        ("aten::index_select", "out", [_empty((0, B, B)), 1, np.array([B], np.int64)], (0, 1, B)),
        "error 0x300 kernel: bad argument (a=2, b=2147483647)",
    ),
    "cat": (
        ("aten::cat", "out", [Tensors([_empty((0, B, B, B, 7)), _empty((0, B, B, B, 9))]), 4], (0, B, B, B, 16)),
        "ok",
    ),
    "constant_pad_nd": (
        ("aten::constant_pad_nd", "out", [_empty((0, B, B, B, 5)), [1, 1], 0.0], (0, B, B, B, 7)),
        "ok",
    ),
    "flip": (("aten::flip", "out", [_empty((0, B, B, B)), [1]], (0, B, B, B)), "ok"),
    "select_copy": (("aten::select_copy", "int_out", [_empty((3, 0, B, B, B)), 0, 2], (0, B, B, B)), "ok"),
    "upsample_nearest2d": (
        ("aten::upsample_nearest2d", "vec_out", [_empty((0, B, B, B)), [2, 2], None], (0, B, 2, 2)),
        "ok",
    ),
    "upsample_bilinear2d": (
        ("aten::upsample_bilinear2d", "vec_out", [_empty((0, B, 2, 2)), [2, 2], False, None], (0, B, 2, 2)),
        "ok",
    ),
    "max_pool2d": (("aten::max_pool2d", "out", [_empty((0, B, B, B)), [1], [], [0], [1], False], (0, B, B, B)), "ok"),
    "avg_pool2d": (
        ("aten::avg_pool2d", "out", [_empty((0, B, B, B)), [1], [], [0], False, True, None], (0, B, B, B)),
        "ok",
    ),
    "matmul": (("aten::matmul", "out", [_empty((0, B, B, B)), _empty((0, B, B, B))], (0, B, B, B)), "ok"),
    "sort": (
        (
            "aten::sort",
            "values",
            [_empty((0, B, B, B)), 1, False],
            Outs((((0, B, B, B), np.float32), ((0, B, B, B), np.int64))),
        ),
        "ok",
    ),
    "sum": (("aten::sum", "IntList_out", [_empty((0, B, B, B)), [1], False, None], (0, B, B)), "ok"),
    "embedding": (("aten::embedding", "out", [_empty((0, B)), np.array([], np.int64), -1, False, False], (0, B)), "ok"),
    # groups beyond int32 and at int64's ends, once a signed product in the shape check
    "conv_groups_2_62": (
        (
            "aten::convolution",
            "out",
            [
                In(np.ones((1, 4, 3, 3), np.float32)),
                np.ones((4, 1, 1, 1), np.float32),
                None,
                [1],
                [0],
                [1],
                False,
                [0],
                2**62,
            ],
            (1, 4, 3, 3),
        ),
        "error 0x301 kernel: shape mismatch (a=8, b=0)",
    ),
    "conv_groups_max": (
        (
            "aten::convolution",
            "out",
            [
                In(np.ones((1, 4, 3, 3), np.float32)),
                np.ones((4, 1, 1, 1), np.float32),
                None,
                [1],
                [0],
                [1],
                True,
                [0],
                2**63 - 1,
            ],
            (1, 4, 3, 3),
        ),
        "error 0x301 kernel: shape mismatch (a=8, b=4294967295)",
    ),
    "conv_groups_min": (
        (
            "aten::convolution",
            "out",
            [
                In(np.ones((1, 4, 3, 3), np.float32)),
                np.ones((4, 1, 1, 1), np.float32),
                None,
                [1],
                [0],
                [1],
                False,
                [0],
                -(2**63),
            ],
            (1, 4, 3, 3),
        ),
        "error 0x301 kernel: shape mismatch (a=8, b=0)",
    ),
}


@pytest.mark.parametrize("name", list(EMPTY_CASES))
def test_integers_from_the_program_never_overflow(runtime_host, tmp_path, name):
    """run_tool fails on any UBSan or AddressSanitizer report; the call ends as stated."""
    case, expected = EMPTY_CASES[name]
    data, arrays = single_kernel(*case)
    done = _run(runtime_host, tmp_path, data, inputs=arrays)
    if expected == "ok":
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert _error(done) == expected
