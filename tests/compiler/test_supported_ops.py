"""docs/SUPPORTED_OPS.md is what kiln.partition.supported_ops generates
from the support rules, and says what the rules do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kiln.partition import supported_ops

ROOT = Path(__file__).resolve().parents[2]


def section(text: str, heading: str) -> list[str]:
    """The lines of the markdown section whose heading is `heading`."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def test_supported_ops_md_is_up_to_date():
    committed = (ROOT / "docs" / "SUPPORTED_OPS.md").read_text()
    assert committed == supported_ops.markdown(), (
        f"SUPPORTED_OPS.md is stale: run .venv/bin/{supported_ops.COMMAND} and commit it"
    )


def test_each_family_column_says_where_a_rule_applies():
    """Two rules as support.py states them: the 16-bit transpose convolution is refused on
    Ethos-U55 and U65 only; the limit of strides beyond 1..3 holds on every family."""
    text = supported_ops.markdown()
    rows = section(text, "## `aten.conv_transpose2d.input`")
    assert rows[1] == "| Rule: the op stays on the CPU with this reason when it fails | U55 | U65 | U85 |"
    (u55_only,) = [r for r in rows if "`int8_transpose_conv_on_u55`" in r]
    assert u55_only.endswith("| checked | checked | - |")
    (stride,) = [r for r in section(text, "## `aten.conv2d.default`") if "`strided_conv_groups`" in r]
    assert stride.startswith("| *op_type* with stride *stride* and groups *groups*: kiln runs a stride beyond")
    assert stride.endswith("(`strided_conv_groups`) | checked | checked | checked |")


def test_every_lowered_op_is_listed_once():
    from kiln.vocabulary import LOWERED

    headings = [line for line in supported_ops.markdown().splitlines() if line.startswith("## `")]
    listed = [op.strip("`") for h in headings for op in h.removeprefix("## ").split(", ")]
    assert sorted(listed) == sorted(str(op) for op in LOWERED)


def command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kiln.partition.supported_ops", *args], capture_output=True, text=True, timeout=300
    )


HEADER = ["| Rule: the op stays on the CPU with this reason when it fails | U55 | U65 | U85 |", "|---|---|---|---|"]
EVERY_FAMILY = " | checked | checked | checked |"


def test_the_command_writes_the_file(tmp_path):
    """The sections of three ops worked out by hand from support.py: mul is in the ops of
    quantized_constants, finite_scalars and representable_rescale only; add and sub are in
    the first two and unit_alpha's, so they share a section; relu is in no rule's ops."""
    run = command("--output", str(tmp_path / "ops.md"))
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
    text = (tmp_path / "ops.md").read_text()
    constant = (
        "| *op_type* with a constant operand that is not an int8 or int16 tensor quantized per tensor is not "
        "lowered (`quantized_constants`)" + EVERY_FAMILY
    )
    scalar = (
        "| *op_type* with a scalar operand that is not a finite number is not lowered (`finite_scalars`)" + EVERY_FAMILY
    )
    alpha = "| *op_type* with alpha other than 1 is not lowered (`unit_alpha`)" + EVERY_FAMILY
    rescale = (
        "| *op_type*: requantizing its product takes a factor of *rescale_factor* (its operands' scales multiplied, "
        "over its output's scale), too large for TOSA RESCALE (*rescale_bits*-bit multipliers): its output's "
        "calibrated range is tiny next to its operands' (`representable_rescale`)" + EVERY_FAMILY
    )
    assert section(text, "## `aten.mul.Tensor`") == ["", *HEADER, constant, scalar, rescale, ""]
    assert section(text, "## `aten.add.Tensor`, `aten.sub.Tensor`") == ["", *HEADER, constant, scalar, alpha, ""]
    (plain,) = [line for line in text.splitlines() if line.startswith("## ") and "`aten.relu.default`" in line]
    assert section(text, plain) == ["", "Only the rules for every operator."]


def test_the_command_reports_an_unwritable_file_in_one_line(tmp_path):
    run = command("--output", str(tmp_path / "no such folder" / "ops.md"))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("python -m kiln.partition.supported_ops: error: ") and run.stderr.count("\n") == 1
    assert "no such folder" in run.stderr and "Traceback" not in run.stderr


def test_an_op_on_bool_or_integer_tensors_is_refused_for_its_types_not_as_unquantized():
    """A permute of a bool tensor (say, a mask) is kept off the NPU because of its type; the
    quantizer never quantizes such tensors, so "does not quantize" would name the wrong cause."""
    import torch

    from kiln import boards
    from kiln.graph import Op, Value
    from kiln.partition import support

    aten = torch.ops.aten
    target = boards.target("ethos-u55-128").npu
    for dtype in ("bool", "int32"):
        x, y = Value("x", (1, 2, 3), dtype), Value("y", (1, 3, 2), dtype)
        op = Op("permute", aten.permute.default, (x, [0, 2, 1]), {}, [y])
        assert support.reason(op, target) == (
            f"{dtype} tensors: kiln puts int8 and int16 activations on the NPU, bool ones as a comparison's result, "
            "a logical op's operands, a select's condition or a view of those, argmax's int32 indices and the "
            "indices a gather, a scatter or a comparison reads checked on the CPU, and int32 products (exact modulo "
            "2^32, as PyTorch's); other integer and bool tensors stay on the CPU, whose integer arithmetic wraps as "
            "PyTorch's does (TOSA leaves int32 overflow unpredictable)"
        )
    x, y = Value("x", (1, 2, 3), "float32"), Value("y", (1, 3, 2), "float32")
    op = Op("permute", aten.permute.default, (x, [0, 2, 1]), {}, [y])
    assert support.reason(op, target) == (
        "stays in float: kiln's quantizer does not quantize aten.permute, and the NPU computes in integers"
    )


def test_constant_and_scalar_operands_are_refused_only_when_they_cannot_be_lowered():
    """A quantized constant operand (a parameter: int8 data, per-tensor qparams) and a finite
    scalar pass; a float constant and an infinite scalar are refused with the rule's reason."""
    import math

    import numpy as np
    import torch

    from kiln import boards
    from kiln.graph import Op, QParams, Value
    from kiln.partition import support

    aten = torch.ops.aten
    target = boards.target("ethos-u55-128").npu
    qp = QParams(0.02, 3)
    x, y = Value("x", (1, 4, 6), "int8", qp), Value("y", (1, 4, 6), "int8", qp)
    weight = Value("w", (6,), "int8", QParams(0.01, -2), data=np.arange(6, dtype=np.int8))
    assert support.reason(Op("add", aten.add.Tensor, (x, weight), {}, [y]), target) is None
    for c in (1.0, -0.5, 0, 3):
        assert support.reason(Op("mul", aten.mul.Tensor, (x, c), {}, [y]), target) is None
        assert support.reason(Op("sub", aten.sub.Tensor, (x, c), {}, [y]), target) is None
    float_weight = Value("w", (6,), "float32", data=np.ones(6, np.float32))
    assert support.reason(Op("sub", aten.sub.Tensor, (x, float_weight), {}, [y]), target) == (
        "aten.sub with a constant operand that is not an int8 or int16 tensor quantized per tensor is not lowered"
    )
    assert support.reason(Op("add", aten.add.Tensor, (x, math.inf), {}, [y]), target) == (
        "aten.add with a scalar operand that is not a finite number is not lowered"
    )
    matrix = Value("m", (6, 5), "int8", QParams(0.01, 1), data=np.ones((6, 5), np.int8))
    assert (
        support.reason(Op("matmul", aten.matmul.default, (x, matrix), {}, [Value("z", (1, 4, 5), "int8", qp)]), target)
        is None
    )


def test_a_view_of_bools_goes_to_the_npu_only_where_vela_takes_bools():
    """An unsqueeze of a mask (bert's padding mask before its select) is placed on Ethos-U85; on
    Ethos-U55 it stays on the CPU for the family's reason, not for its type."""
    import torch

    from kiln import boards
    from kiln.graph import Op, Value
    from kiln.partition import support

    x, y = Value("x", (1, 16), "bool"), Value("y", (1, 1, 16), "bool")
    op = Op("unsqueeze", torch.ops.aten.unsqueeze.default, (x, 1), {}, [y])
    assert support.reason(op, boards.target("ethos-u85-256").npu) is None
    assert support.reason(op, boards.target("ethos-u55-128").npu) == (
        "aten.unsqueeze of bool tensors: Vela 5.2.0 takes bool tensors on Ethos-U85 only (for its comparisons, "
        "logical ops and selects)"
    )
