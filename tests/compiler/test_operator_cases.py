"""Every single-operator case the frontend issue lists (tests/compiler/operator_cases.py) compiles with
no error, and every element of `kiln run-host`'s outputs is within one output step of the PT2E
reference (integer outputs exactly). One step, not the fuzzer's looser bound: a single operator
rounds once, and the PT2E reference computes in float and may land on the other side of a tie.
Measured on ethos-u55-128: every element of all 46 cases equal to the reference.
The firmware side is tests/fvp/test_operator_cases.py."""

from __future__ import annotations

import pytest
import torch

from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.compiler import operator_cases
from tests.compiler.random_models import steps_off_pt2e

STEPS = 1  # the farthest any element of a single operator's output may be from the reference


def compile_and_compare(name: str, module: torch.nn.Module, inputs: tuple, target: str):
    result = kc.compile_model(LoadedModel(name, module, inputs), CompileSpec(target), log=lambda line: None)
    got = host.run(result.pte, [x.numpy() for x in inputs])
    worst, _ = steps_off_pt2e(result, inputs, got)
    assert worst <= STEPS, f"{name}: an element is {worst:.0f} output steps from the PT2E reference"
    return result


@pytest.mark.parametrize("name", operator_cases.CASES)
def test_operator_case_compiles_and_matches_pt2e(name):
    make, inputs = operator_cases.CASES[name]
    compile_and_compare(name, make().eval(), inputs(), "ethos-u55-128")


# Ethos-U65-256: another family's rules and Vela's; the U55's other MAC counts place the same ops
# (bench/coverage.py --target ethos-u55-256 compiles every case for it; 14 s of the suite's budget here).
@pytest.mark.parametrize("target", ["ethos-u65-256"])
def test_all_operator_cases_in_one_model_compile_for_other_npus(target):
    module, inputs = operator_cases.combined()
    result = compile_and_compare("operator_cases", module, inputs, target)
    assert len(result.graph.outputs) >= len(operator_cases.CASES)
