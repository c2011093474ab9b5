"""The coverage benchmark's single-operator cases (tests/compiler/operator_cases_more.py) are at least 100,
named apart from tests/compiler/operator_cases.py's, and each runs in eager mode and exports with
torch.export; bench/coverage.py's summary against ExecuTorch reads results as the driver
writes them (a tiny fixture, no ExecuTorch run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from tests.compiler import operator_cases, operator_cases_more

ROOT = Path(__file__).resolve().parents[2]


def test_at_least_100_cases_named_apart_from_the_first_46():
    assert len(operator_cases_more.CASES) >= 100
    assert not set(operator_cases_more.CASES) & set(operator_cases.CASES)


@pytest.mark.parametrize("name", operator_cases_more.CASES)
def test_case_runs_in_eager_and_exports(name):
    make, inputs = operator_cases_more.CASES[name]
    module, xs = make().eval(), inputs()
    expected = module(*xs)
    exported = torch.export.export(module, xs)
    got = exported.module()(*xs)
    assert torch.equal(got, expected)


def _coverage():
    spec = importlib.util.spec_from_file_location("bench_coverage", ROOT / "bench" / "coverage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def _result(npu: dict, cpu: dict, cycles: int | None = 100, error: str | None = None, reasons=()) -> dict:
    return {
        "compiled": error is None,
        "error": error,
        "npu_ops": npu,
        "cpu_ops": cpu,
        "edges": 2,
        "npu_cycles": cycles,
        "reasons": list(reasons),
    }


def test_summary_lists_the_gaps_both_ways():
    coverage = _coverage()
    rows = [
        (
            "more",
            "both",
            _result({"conv2d": 1}, {}, 50),
            {**_result({"convolution": 1}, {}, 100), "kiln_vela_cycles": 40},
        ),
        ("more", "gap", _result({}, {"cumsum": 1}, 0, reasons=["cumsum: no lowering"]), _result({"cumsum": 1}, {})),
        ("more", "crash", _result({}, {}, None, error="CRASH KeyError: x"), _result({"pad": 1}, {})),
        ("more", "ahead", _result({"sign": 1}, {}), _result({"mul.Tensor": 1}, {"where.self": 3})),
        ("ops", "neither", _result({"mul": 1}, {"sort": 1}), _result({}, {}, None, error="RuntimeError: no")),
    ]
    lines = coverage.summarize(rows, "cases")
    text = "\n".join(lines)
    assert lines[0].startswith("cases: 5; fully on the NPU: kiln 2, ExecuTorch 3, both 1, neither 1;")
    assert lines[1] == (
        "  NPU cycles kiln/ET, geometric mean over those both put fully on the NPU: 0.50 (1; "
        "ExecuTorch's Vela), 1.25 (1; ExecuTorch's TOSA on kiln's Vela); above 1.0x: 0 and 1"
    )
    assert "    gap: cumsum: no lowering" in lines
    assert "    crash: CRASH KeyError: x" in lines
    assert "    ahead: ET on the CPU: where.self x3" in lines
    assert "neither" not in text.split("\n", 1)[1]


def test_transformer_summary_counts_input_conversions_apart():
    coverage = _coverage()
    cast = "dim_order_ops._to_dim_order_copy"
    rows = [
        (
            "transformers",
            "indices",
            {**_result({"linear": 1}, {"kiln.checked_index": 1, "_to_copy": 1}, 50), "input_casts": 1},
            {**_result({"linear": 1}, {cast: 2}, 100), "input_casts": 2},
        ),
        ("transformers", "full", _result({"linear": 1}, {}, 300), _result({"linear": 1}, {}, 200)),
        (
            "transformers",
            "mask",
            _result({"linear": 1}, {"kiln.checked_index": 1, "unsqueeze": 4}),
            {**_result({"linear": 1}, {cast: 1}), "input_casts": 1},
        ),
        (
            "transformers",
            "inner_cast",
            _result({"linear": 1}, {}),
            {**_result({"linear": 1}, {cast: 1}), "input_casts": 0},
        ),
    ]
    assert coverage.summarize(rows, "t")[0].startswith("t: 4; fully on the NPU: kiln 2, ExecuTorch 1, both 1,")
    # both: indices (50/100) and full (300/200); geometric mean sqrt(0.5 * 1.5) = 0.866
    assert coverage.summarize_but_inputs(rows) == [
        "  on the NPU but for the conversions of their inputs: kiln 3, ExecuTorch 3, both 2; NPU cycles kiln/ET, "
        "geometric mean over both: 0.87 (2; ExecuTorch's Vela); above 1.0x: full 1.50"
    ]
    assert coverage.summarize_but_inputs([]) == []
