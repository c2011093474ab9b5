"""Memory fit decided at compile time (kiln.flow.compile_pte, kiln.firmware.runner_build.fit): the
report says what each region of the board holds, and a program the board cannot hold fails the
compile naming the region, the need and the room, before anything is built or run."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from torch import nn

from kiln import flow
from kiln.errors import RunnerBuildError, UsageError
from kiln.firmware import runner_build
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec

SRAM = 4 * 1024 * 1024  # corstone-300's "npu" region (boards/corstone-300/board.toml)


def wide_linear() -> LoadedModel:
    """5.2 M int8 weights: more than corstone-300's 4 MiB SRAM holds."""
    torch.manual_seed(0)
    return LoadedModel("wide", nn.Sequential(nn.Linear(2048, 2560), nn.ReLU()).eval(), (torch.randn(1, 2048),))


def test_the_report_says_what_each_region_holds(tmp_path):
    path = tmp_path / "wide.pte"
    result, report_path = flow.compile_pte(wide_linear(), CompileSpec("ethos-u55-128"), path, log=lambda line: None)
    regions = {r["region"]: r for r in json.loads(report_path.read_text())["memory"]["regions"]}
    assert regions["ddr"]["placed"]["the .pte"] > 2048 * 2560  # Shared_Sram: the weights in DDR
    assert all(r["fits"] and r["need"] == sum(r["placed"].values()) for r in regions.values())
    assert regions["dtcm"]["placed"]["the main stack"] == 0x8000
    assert result.report["memory"]["regions"] == list(regions.values())


def test_a_program_the_board_cannot_hold_fails_naming_region_need_and_room(tmp_path):
    path = tmp_path / "wide.pte"
    with pytest.raises(RunnerBuildError) as error:
        flow.compile_pte(wide_linear(), CompileSpec("ethos-u55-128", memory_mode="Sram_Only"), path, log=print)
    message = str(error.value)
    assert "does not fit corstone-300 in memory mode Sram_Only" in message
    assert "region sram needs" in message and f"it has {SRAM:,}" in message and "the .pte" in message
    (sram,) = [
        r for r in json.loads(path.with_suffix(".json").read_text())["memory"]["regions"] if r["region"] == "sram"
    ]
    assert not sram["fits"] and sram["need"] > SRAM and sram["room"] == SRAM


def half_sram_linear() -> LoadedModel:
    """2.6 M int8 weights: one fits corstone-300's 4 MiB SRAM, two do not."""
    torch.manual_seed(1)
    return LoadedModel("half", nn.Sequential(nn.Linear(2048, 1280), nn.ReLU()).eval(), (torch.randn(1, 2048),))


@pytest.fixture(scope="module")
def half(tmp_path_factory):
    """The model compiled for Sram_Only (.pte and scratch in the SRAM), and a copy named other.pte."""
    folder = tmp_path_factory.mktemp("half")
    spec = CompileSpec("ethos-u55-128", memory_mode="Sram_Only")
    flow.compile_pte(half_sram_linear(), spec, folder / "half.pte", log=lambda line: None)
    for suffix in (".pte", ".json"):
        shutil.copyfile(folder / f"half{suffix}", folder / f"other{suffix}")
    return folder / "half.pte", folder / "other.pte"


def test_an_image_of_models_that_fit_alone_but_not_together_fails_before_the_build(half, tmp_path):
    """kiln build --pte A --pte B checks the image's plan against the board before it generates or
    builds anything: each model's compile checked only itself."""
    a, b = half
    regions = {r["region"]: r for r in json.loads(a.with_suffix(".json").read_text())["memory"]["regions"]}
    assert regions["sram"]["fits"] and 2 * regions["sram"]["placed"]["the .pte"] > SRAM
    with pytest.raises(RunnerBuildError) as error:
        runner_build.build_runner([a, b], "ethos-u55-128", output=tmp_path / "build", echo=print)
    message = str(error.value)
    assert message.startswith("half+other does not fit corstone-300 in memory mode Sram_Only: region sram needs ")
    assert "half.pte " in message and "other.pte " in message and f"it has {SRAM:,}" in message
    assert not (tmp_path / "build" / "generated").exists()


def test_the_models_of_an_image_need_one_memory_mode_and_distinct_names(half, tmp_path):
    a, _ = half
    with pytest.raises(UsageError, match=f"^{a} is given twice$"):
        runner_build.plan([a, a], "ethos-u55-128")
    (tmp_path / "again").mkdir()
    shutil.copyfile(a, tmp_path / "again" / "half.pte")
    with pytest.raises(UsageError, match="are both named 'half', the name the firmware chooses a model by: rename one"):
        runner_build.plan([a, tmp_path / "again" / "half.pte"], "ethos-u55-128")
    flow.compile_pte(half_sram_linear(), CompileSpec("ethos-u55-128"), tmp_path / "shared.pte", log=lambda line: None)
    with pytest.raises(UsageError) as error:
        runner_build.plan([a, tmp_path / "shared.pte"], "ethos-u55-128")
    assert "need one memory mode; these have half Sram_Only, shared Shared_Sram" in str(error.value)
