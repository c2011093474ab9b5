"""Memory fit decided at compile time (kiln.flow.compile_pte, kiln.firmware.runner_build.fit): the
report says what each region of the board holds, and a program the board cannot hold fails the
compile naming the region, the need and the room, before anything is built or run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from kiln import flow
from kiln.errors import RunnerBuildError
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
