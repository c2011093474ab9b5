"""kiln's per-point MLIA JSON against the schemas MLIA 0.12.3 publishes (conftest's mlia_errors);
test_sweep.py checks a profiled point's document, with its per-layer breakdowns, the same way."""

import json


def test_every_point_validates(mlia_errors, pool_sweep):
    docs = sorted((pool_sweep.output / "mlia").glob("*.json"))
    assert len(docs) == 8  # the shared sweep's points: compiled, refused and failed ones alike
    for path in docs:
        assert mlia_errors(json.loads(path.read_text())) == [], path.name


def test_the_schema_refuses_a_broken_document(mlia_errors, pool_sweep):
    """The check can fail: a document without its results, or with a metric lacking its unit."""
    doc = json.loads((pool_sweep.output / "mlia" / "tiny_cnn-ethos-u55-128-ref-default-a8.json").read_text())
    assert mlia_errors({k: v for k, v in doc.items() if k != "results"})
    (perf,) = doc["results"]
    del perf["metrics"][0]["unit"]
    assert mlia_errors(doc)
