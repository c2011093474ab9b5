"""kiln's per-point MLIA JSON against the schemas Arm's ML Inference Advisor 0.12.3 publishes in its
wheel (output schema 1.2.0, which refers to its target schema 1.0.0). scripts/setup.sh downloads the
wheel into .venv/share/mlia; the schemas are read from it here, never copied into kiln."""

import json
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest
import referencing

from kiln.sweep import Grid, run
from kiln.sweep.cache import Cache

WHEEL = Path(sys.prefix) / "share" / "mlia" / "mlia-0.12.3-py3-none-any.whl"


@pytest.fixture(scope="module")
def validator():
    if not WHEEL.is_file():
        pytest.fail(f"{WHEEL} is missing: ./scripts/setup.sh downloads it")
    with zipfile.ZipFile(WHEEL) as wheel:
        output, target = (
            json.loads(wheel.read(f"mlia/resources/mlia-{name}.json"))
            for name in ("output-schema-1.2.0", "target-schema-1.0.0")
        )
    registry = referencing.Registry().with_resource(target["$id"], referencing.Resource.from_contents(target))
    return jsonschema.Draft202012Validator(
        output, registry=registry, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_every_point_and_a_profiled_one_validate(validator, pool_sweep, tmp_path):
    docs = sorted((pool_sweep.output / "mlia").glob("*.json"))
    assert len(docs) == 8  # the shared sweep's points: compiled, refused and failed ones alike
    # tiny_cnn meets 1 ms on the U55-128: the budget's point is profiled, its layers in `breakdowns`
    grid = Grid(models=("tiny_cnn",), targets=("ethos-u55-128",))
    run(grid, tmp_path / "out", cache=Cache(pool_sweep.cache), workers=1, budget_ms=1.0, progress=None)
    (profiled,) = (tmp_path / "out" / "mlia").glob("*-profile.json")
    assert json.loads(profiled.read_text())["results"][0]["breakdowns"]
    for path in docs + [profiled]:
        assert _errors(validator, json.loads(path.read_text())) == [], path.name


def test_the_schema_refuses_a_broken_document(validator, pool_sweep):
    """The check can fail: a document without its results, or with a metric lacking its unit."""
    doc = json.loads((pool_sweep.output / "mlia" / "tiny_cnn-ethos-u55-128-ref-default-a8.json").read_text())
    assert _errors(validator, {k: v for k, v in doc.items() if k != "results"})
    (perf,) = doc["results"]
    del perf["metrics"][0]["unit"]
    assert _errors(validator, doc)
