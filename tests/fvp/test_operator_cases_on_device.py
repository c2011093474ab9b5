"""Every single-operator case of tests/operator_cases.py runs on the virtual platform bit for
bit as `kiln run-host` computes it. The cases go in groups, one model (one firmware image) per
group, so each image's command line (an absolute path per input) fits the runner's."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from kiln import flow
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec
from tests.compiler import operator_cases

from .helpers import assert_matches_host, random_samples

pytestmark = pytest.mark.fvp
GROUP_INPUTS = 16  # inputs per image: 16 absolute paths of the short folder below fit in 1024 bytes


def groups() -> list[list[str]]:
    result, inputs = [[]], 0
    for name in operator_cases.CASES:
        arity = len(operator_cases.CASES[name][1]())
        if inputs + arity > GROUP_INPUTS:
            result.append([])
            inputs = 0
        result[-1].append(name)
        inputs += arity
    return result


@pytest.mark.parametrize("names", groups(), ids=lambda names: f"{names[0]}..{names[-1]}")
def test_operator_cases_run_on_the_virtual_platform_as_run_host(work, builder, names):
    module, inputs = operator_cases.combined(names)
    path = work / f"operator_cases_{names[0]}.pte"
    flow.compile_pte(
        LoadedModel("operator_cases", module, inputs), CompileSpec("ethos-u55-128"), path, log=lambda line: None
    )
    elf = builder(path)
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(path, elf, "ethos-u55-128", random_samples(path, 2, seed=11), Path(short))
