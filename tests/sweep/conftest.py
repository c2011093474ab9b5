"""A short sweep, computed once on the local pool, that the sweep tests share: tiny_cnn and a
model that cannot compile, on an Ethos-U55 and an Ethos-U85, in the board's default memory mode
and in Dedicated_Sram_256KB (which the U55 does not have): 8 points, 3 of them compiles. And
`mlia_errors`: a document's errors against the schemas Arm's ML Inference Advisor 0.12.3 publishes
in its wheel (output schema 1.2.0, which refers to its target schema 1.0.0), which
scripts/setup.sh downloads into .venv/share/mlia; the schemas are read from it, never copied."""

import json
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import referencing

from kiln.sweep import Grid, Sweep, run
from kiln.sweep.cache import Cache

MLIA_WHEEL = Path(sys.prefix) / "share" / "mlia" / "mlia-0.12.3-py3-none-any.whl"

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


@pytest.fixture(scope="session")
def mlia_errors():
    """A function: an MLIA JSON document's schema errors ("path: message"), [] for a valid one."""
    if not MLIA_WHEEL.is_file():
        pytest.fail(f"{MLIA_WHEEL} is missing: ./scripts/setup.sh downloads it")
    with zipfile.ZipFile(MLIA_WHEEL) as wheel:
        output, target = (
            json.loads(wheel.read(f"mlia/resources/mlia-{name}.json"))
            for name in ("output-schema-1.2.0", "target-schema-1.0.0")
        )
    registry = referencing.Registry().with_resource(target["$id"], referencing.Resource.from_contents(target))
    validator = jsonschema.Draft202012Validator(
        output, registry=registry, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return lambda doc: [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
