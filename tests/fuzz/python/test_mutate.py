"""The host-side .pte readers under the mutation fuzzer (mutate.py): the regression corpus
replayed (every input that ever found a defect), then a short seeded run that must find nothing."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutate  # noqa: E402

CORPUS = sorted(mutate.CORPUS.glob("*.pte"))
SUITE_SECONDS = 5.0  # the seeded run's fuzzing time; the worker's set-up (imports, seeds: ~10 s) comes on top


def test_the_corpus_holds_every_kind_of_finding():
    names = {p.stem for p in CORPUS}
    assert "tosa-reference-model-segfault" in names and "memoryerror-movement" in names, names


@pytest.fixture(scope="module")
def warm():
    """Imports and the isolation server ready before the first timed execution: on a loaded
    machine they alone can take most of its 10 s."""
    mutate.warm_up()


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_a_corpus_input_ends_in_a_kiln_error_or_a_result(path, tmp_path, warm):
    previous = signal.signal(signal.SIGALRM, mutate._raise_hang)
    try:
        assert mutate.classify(path.read_bytes(), tmp_path) is None
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_seeded_run_finds_nothing(tmp_path):
    result = mutate.run(SUITE_SECONDS, seed=14, findings_dir=tmp_path)
    assert result["executions"] > 100, result
    assert not result["findings"], [f["what"] for f in result["findings"]]
