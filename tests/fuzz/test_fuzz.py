"""kiln's libFuzzer targets (tests/fuzz/CMakeLists.txt: the runtime under clang's ASan and UBSan,
-fno-sanitize-recover=all) in the suite: a short seeded run of each target from kiln-written
seeds (fuzz_seeds), and a replay of the regression corpus (tests/fuzz/corpus/<target>/:
every input that ever found a defect) on every run. bench/fuzz.py runs the long campaigns.

References independent of the code under test: the seeds are programs kiln's compiler and
ExecuTorch wrote (every one must load, bind with the real Ethos-U delegate and run), and
libFuzzer's own report (a sanitizer report, a trap on a broken promise of the harness, a
leak or a hang is a finding and fails the test, naming the saved input).
"""

from __future__ import annotations

import re
import subprocess

import fuzz_seeds
import libfuzzer
import pytest

# Executions per target of the short run (seeded, so the same inputs each time), and the
# seconds it may take at most (whichever comes first); 5-10 s each on the 2-core machine.
SHORT_RUNS = {"pte": 150_000, "payload": 1_000_000, "cop1": 1_000_000, "bundle": 150_000}
SHORT_SECONDS = 20


@pytest.fixture(scope="session")
def fuzzers(tmp_path_factory):
    reason = libfuzzer.missing_libfuzzer()
    if reason is not None:
        pytest.skip(f"the fuzzers need clang's libFuzzer: {reason}")
    return libfuzzer.build(tmp_path_factory.mktemp("fuzz-build"))


@pytest.fixture(scope="session")
def seeds():
    """Seeds and dictionaries, cached by content under build/fuzz/seeds."""
    return fuzz_seeds.write(libfuzzer.ROOT / "build" / "fuzz" / "seeds")


def finding_message(figures: libfuzzer.Figures) -> str:
    saved = ", ".join(str(p) for p in figures.findings) or "no input saved"
    summary = "; ".join(figures.summaries) or figures.log[-3000:]
    return (
        f"fuzz_{figures.target} found a defect ({summary}); input: {saved}. Fix it and add the input to "
        f"tests/fuzz/corpus/{figures.target}/"
    )


@pytest.mark.parametrize("target", libfuzzer.TARGETS)
def test_short_seeded_run_finds_nothing(fuzzers, seeds, target, tmp_path):
    artifacts = libfuzzer.ROOT / "build" / "fuzz" / "findings" / target
    figures = libfuzzer.run(
        fuzzers, target, seeds, tmp_path / "corpus", artifacts, seconds=SHORT_SECONDS, runs=SHORT_RUNS[target], seed=1
    )
    assert figures.status == 0 and not figures.findings, finding_message(figures)
    # It ran: the seeds loaded (INITED) and it executed until the run count or the time was up.
    assert figures.cov > 0 and figures.executions > 0, figures.log[-3000:]
    assert figures.executions >= SHORT_RUNS[target] or figures.seconds >= SHORT_SECONDS - 1, figures.log[-2000:]


@pytest.mark.parametrize("target", libfuzzer.TARGETS)
def test_regression_corpus_replays_clean(fuzzers, target):
    files = sorted((libfuzzer.CORPUS / target).glob("*"))
    if not files:
        pytest.skip(f"tests/fuzz/corpus/{target}/ holds no input yet")
    done = libfuzzer.replay(fuzzers, target, files)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"Executed {files[-1]}" in done.stderr


def stats(fuzzers, files) -> dict[str, int]:
    done = subprocess.run(
        [str(libfuzzer.binary(fuzzers, "pte")), *map(str, files)],
        capture_output=True,
        text=True,
        env={"KILN_FUZZ_STATS": "1"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = re.search(r"kiln fuzz_pte: inputs (\d+) loaded (\d+) created (\d+) executed (\d+)", done.stderr)
    return dict(zip(("inputs", "loaded", "created", "executed"), map(int, found.groups())))


def test_pte_target_runs_every_kiln_and_executorch_program(fuzzers, seeds):
    """The harness drives the whole runtime: every program kiln compiled (delegated ones through
    the real EthosUBackend and Driver::check), the two-method state program (both methods) and
    ExecuTorch's fixtures execute; every kernel program binds (a few then refuse the harness's
    arbitrary index inputs at execute)."""
    directory = seeds / "seeds" / "pte"
    whole = [p for p in directory.iterdir() if not p.name.startswith("kernel_")]
    kernels = sorted(directory.glob("kernel_*"))
    written = len(fuzz_seeds.state_programs())
    assert len(whole) == len(fuzz_seeds.MODELS) + written + len(list(fuzz_seeds.FIXTURES.glob("*.pte")))
    assert stats(fuzzers, whole) == {
        "inputs": len(whole),
        "loaded": len(whole),
        "created": len(whole),
        "executed": len(whole),
    }
    counts = stats(fuzzers, kernels)
    # every input libFuzzer ran binds (in one full-suite run it reported 261 inputs for these 260
    # files, cause not found; alone it runs each once)
    assert counts["created"] == counts["inputs"] >= len(kernels), counts
    assert counts["executed"] >= 0.95 * len(kernels), counts
