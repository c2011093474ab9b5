"""Builds kiln's libFuzzer targets (tests/fuzz/CMakeLists.txt) and runs them: the suite's short
seeded runs and regression replays (test_fuzz.py) and bench/fuzz.py's campaigns.

A run's figures come from libFuzzer's own report: executions and executions per second
(-print_final_stats), coverage (the last status line's cov: edges and ft: features,
corp: corpus units) and findings (the inputs libFuzzer saved for a crash, a sanitizer
report, a leak, a timeout or running out of memory: crash-*, leak-*, timeout-*, oom-*).
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import fuzz_seeds

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "fuzz"
# The regression corpus: every input that ever found a defect, by target (corpus/<target>/).
CORPUS = SOURCE / "corpus"
TARGETS = fuzz_seeds.TARGETS
# Debian's clang whose runtime has libFuzzer (packages clang-19, libclang-rt-19-dev:
# ./scripts/setup.sh installs them).
CLANG = "clang++-19"
FINDING_PREFIXES = ("crash-", "leak-", "timeout-", "oom-")
# Seconds one input may run before libFuzzer calls it a finding (a hang).
UNIT_TIMEOUT = 10
RSS_BUDGET_MB = 2048  # what a fuzzer may grow by (libFuzzer's default limit)


def binary(build: Path, target: str) -> Path:
    return build / f"fuzz_{target}"


def missing_libfuzzer() -> str | None:
    """Why the fuzzers cannot be built here (None when they can)."""
    clang = shutil.which(CLANG)
    if clang is None:
        return f"{CLANG} is not installed (./scripts/setup.sh installs clang-19 and libclang-rt-19-dev)"
    resource = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    if not any(Path(resource).rglob("libclang_rt.fuzzer*.a")):
        return f"{CLANG} has no libFuzzer runtime under {resource} (install libclang-rt-19-dev)"
    return None


def build(directory: Path) -> Path:
    """Configures and builds the fuzz targets in `directory` (ninja -j2); returns it."""
    npu_id, npu_config = fuzz_seeds.npu_registers()
    clang = shutil.which(CLANG)
    subprocess.run(
        [
            "cmake",
            "-S",
            str(SOURCE),
            "-B",
            str(directory),
            "-G",
            "Ninja",
            f"-DCMAKE_CXX_COMPILER={clang}",
            f"-DKILN_PYTHON={sys.executable}",
            f"-DKILN_FUZZ_NPU_ID={npu_id:#x}",
            f"-DKILN_FUZZ_NPU_CONFIG={npu_config:#x}",
        ],
        check=True,
        capture_output=True,
    )
    done = subprocess.run(["ninja", "-j2", "-C", str(directory)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the fuzz targets failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
    return directory


@dataclass
class Figures:
    target: str
    executions: int = 0
    seconds: float = 0.0
    cov: int = 0  # edges covered (libFuzzer's cov:)
    ft: int = 0  # features (libFuzzer's ft:)
    corpus: int = 0  # units in the corpus at the end
    findings: list[Path] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)  # each finding's sanitizer/libFuzzer summary line
    status: int = 0  # libFuzzer's exit status
    log: str = ""  # its output (standard error)

    @property
    def exec_per_sec(self) -> float:
        return self.executions / self.seconds if self.seconds else 0.0


STATUS_LINE = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.M)
SUMMARY = re.compile(r"^(SUMMARY: .*|==\d+== ERROR: libFuzzer: .*|kiln fuzz: .*)$", re.M)


def parse(target: str, log: str, status: int, findings: list[Path]) -> Figures:
    """The figures of one libFuzzer process from its output."""
    figures = Figures(target, status=status, findings=findings, summaries=SUMMARY.findall(log))
    lines = STATUS_LINE.findall(log)
    if lines:
        last = lines[-1]
        figures.executions, figures.cov, figures.ft, figures.corpus = (int(v) for v in last)
    executed = re.search(r"^stat::number_of_executed_units:\s*(\d+)", log, re.M)
    if executed:
        figures.executions = int(executed.group(1))
    return figures


def run(
    build_dir: Path,
    target: str,
    seeds: Path,
    corpus: Path,
    artifacts: Path,
    *,
    seconds: float,
    runs: int | None = None,
    seed: int = 1,
    extra: tuple[Path, ...] = (),
) -> Figures:
    """One libFuzzer process on `target`: new units go to `corpus`, findings to `artifacts`;
    it reads seeds/seeds/<target>, the regression corpus and `extra` too. Stops after `runs`
    executions or `seconds`, whichever is first."""
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    before = set(artifacts.iterdir())
    read = [d for d in (seeds / "seeds" / target, CORPUS / target, *extra) if d.is_dir()]
    command = [
        str(binary(build_dir, target)),
        f"-rss_limit_mb={rss_limit_mb()}",
        f"-seed={seed}",
        f"-max_total_time={max(1, round(seconds))}",
        f"-timeout={UNIT_TIMEOUT}",
        "-print_final_stats=1",
        f"-dict={seeds / f'{target}.dict'}",
        f"-artifact_prefix={artifacts}/",
        str(corpus),
        *map(str, read),
    ]
    if runs is not None:
        command.insert(1, f"-runs={runs}")
    start = time.monotonic()
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=artifacts, timeout=seconds + 10 * UNIT_TIMEOUT + 60
    )
    elapsed = time.monotonic() - start
    found = sorted(p for p in set(artifacts.iterdir()) - before if p.name.startswith(FINDING_PREFIXES))
    figures = parse(target, done.stderr, done.returncode, found)
    figures.seconds = elapsed
    figures.log = done.stderr
    return figures


def rss_limit_mb() -> int:
    """libFuzzer's memory limit for a fuzzer this process starts: RSS_BUDGET_MB above this process's
    own peak resident set. libFuzzer checks the peak that getrusage reports, and Linux hands a
    child its parent's peak across fork and exec (a test worker that compiled models reaches 2 GB,
    libFuzzer's default limit, before the fuzzer allocates anything)."""
    return RSS_BUDGET_MB + resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def replay(build_dir: Path, target: str, files: list[Path]) -> subprocess.CompletedProcess:
    """Runs each of `files` through `target` once (libFuzzer's replay: no mutation)."""
    return subprocess.run(
        [str(binary(build_dir, target)), f"-timeout={UNIT_TIMEOUT}", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60 + UNIT_TIMEOUT * len(files),
    )
