"""Every single-operator case of tests/operator_cases.py, in one model (one firmware image),
runs on the virtual platform bit for bit as `kiln run-host` computes it."""

from __future__ import annotations

import pytest

import operator_cases
from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec
from test_executor_runner import assert_matches_host, random_samples

pytestmark = pytest.mark.fvp


def test_every_operator_case_runs_on_the_virtual_platform_as_run_host(work, builder, tmp_path):
    module, inputs = operator_cases.combined()
    path = work / "operator_cases.pte"
    kc.write(kc.compile_model(LoadedModel("operator_cases", module, inputs), CompileSpec("ethos-u55-128"),
                              log=lambda line: None), path)
    elf = builder(path)
    assert_matches_host(path, elf, "ethos-u55-128", random_samples(path, 2, seed=11), tmp_path)
