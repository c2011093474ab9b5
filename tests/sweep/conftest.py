"""A short sweep, computed once on the local pool, that the sweep tests share: tiny_cnn and a
model that cannot compile, on an Ethos-U55 and an Ethos-U85, in the board's default memory mode
and in Dedicated_Sram_256KB (which the U55 does not have): 8 points, 3 of them compiles."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln.sweep import Grid, Sweep, run
from kiln.sweep.cache import Cache

BROKEN = """
import torch

class Broken(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("this model cannot run")

ModelUnderTest = Broken()
ModelInputs = (torch.ones(1, 4),)
"""


@dataclass
class Swept:
    grid: Grid
    output: Path
    cache: Path
    sweep: Sweep


def small_grid(tmp: Path) -> Grid:
    broken = tmp / "broken.py"
    broken.write_text(BROKEN)
    return Grid(
        models=("tiny_cnn", str(broken)),
        targets=("ethos-u55-128", "ethos-u85-256"),
        memory_modes=(None, "Dedicated_Sram_256KB"),
    )


@pytest.fixture(scope="session")
def pool_sweep(tmp_path_factory) -> Swept:
    tmp = tmp_path_factory.mktemp("sweep")
    grid = small_grid(tmp)
    result = run(grid, tmp / "out", cache=Cache(tmp / "cache"), workers=2, budget_ms=1.0, progress=None)
    return Swept(grid, tmp / "out", tmp / "cache", result)
