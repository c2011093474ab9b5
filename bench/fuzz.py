"""Long fuzzing campaign over kiln's runtime (the libFuzzer targets of tests/fuzz) or its Python readers.

    .venv/bin/python bench/fuzz.py TARGET [SECONDS] [--jobs N] [--seed S]

TARGET: pte (a whole .pte through load, bind with the real Ethos-U delegate, execute),
payload (the delegate's vela_bin_stream parser, then the COP1 checks), cop1 (the COP1 and
command-stream checks alone), all (the three in turn, SECONDS each), or python (the
Python readers' mutation loop, tests/fuzz/python/mutate.py). SECONDS defaults to 300.
N libFuzzer processes (seeds S, S+1, ...) share one corpus, build/fuzz/campaign/<target>,
which grows from campaign to campaign; a process that finds something is started again
(with the next seed) until the time is up. Findings are saved under
build/fuzz/findings/<target>/: replay one with `build/fuzz/build/fuzz_<target> FILE`, and
add it to tests/fuzz/corpus/<target>/ once fixed (python: build/fuzz/findings/python/).
Prints, per target: executions, executions per second, coverage (libFuzzer's cov: edges
and ft: features, the corpus size) and findings.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

import fuzz_seeds  # noqa: E402
import libfuzzer  # noqa: E402

WORK = ROOT / "build" / "fuzz"


def worker(build: Path, seeds: Path, target: str, seed: int, seconds: float, step: int) -> list:
    """One job: libFuzzer processes one after another until `seconds` are used."""
    runs, deadline, seed_now = [], time.monotonic() + seconds, seed
    while (left := deadline - time.monotonic()) >= 1:
        figures = libfuzzer.run(
            build, target, seeds, WORK / "campaign" / target, WORK / "findings" / target, seconds=left, seed=seed_now
        )
        runs.append(figures)
        if not figures.findings and figures.status != 0:
            raise RuntimeError(f"fuzz_{target} stopped with status {figures.status}:\n{figures.log[-3000:]}")
        seed_now += step
    return runs


def campaign(build: Path, seeds: Path, target: str, seconds: float, jobs: int, seed: int) -> None:
    start = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda j: worker(build, seeds, target, seed + j, seconds, jobs), range(jobs)))
    elapsed = time.monotonic() - start
    runs = [f for job in done for f in job]
    executions = sum(f.executions for f in runs)
    last = max((job[-1] for job in done if job), key=lambda f: f.ft)
    print(
        f"{target}: {executions:,} executions in {elapsed:.0f} s with {jobs} job(s): "
        f"{executions / elapsed:,.0f} exec/s; coverage cov {last.cov} ft {last.ft}, corpus {last.corpus} units"
    )
    findings = [(path, f.summaries) for f in runs for path in f.findings]
    print(f"{target}: findings: {len(findings)}")
    for path, summaries in findings:
        print(f"  {path}: {'; '.join(summaries) or 'see the input'}")


def python_campaign(seconds: float, jobs: int, seed: int) -> None:
    """The Python readers' mutation loop (tests/fuzz/python/mutate.py's run), `jobs` at a time."""
    sys.path.insert(0, str(ROOT / "tests" / "fuzz" / "python"))
    try:
        mutate = importlib.import_module("mutate")
    except ModuleNotFoundError:
        sys.exit("bench/fuzz.py: tests/fuzz/python/mutate.py is missing: the python target needs it")
    saved = WORK / "findings" / "python"
    saved.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(mutate.run, [seconds] * jobs, range(seed, seed + jobs), [saved] * jobs))
    elapsed = time.monotonic() - start
    executions = sum(r.get("executions", 0) for r in results)
    findings = [f for r in results for f in (r.get("findings") or [])]
    # Each job's own rate leaves out its set-up (imports, compiling the seeds).
    rate = sum(r.get("executions_per_second", 0) for r in results)
    print(
        f"python: {executions:,} executions in {elapsed:.0f} s with {jobs} job(s), set-up included: "
        f"{rate:,.0f} exec/s while fuzzing"
    )
    print(f"python: findings: {len(findings)}")
    for finding in findings:  # {"what": one line, "input": hex}; the inputs are saved under `saved`
        print(f"  {finding.get('what', finding) if isinstance(finding, dict) else finding}")
    if findings:
        print(f"python: inputs saved under {saved}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=[*libfuzzer.TARGETS, "all", "python"])
    parser.add_argument("seconds", type=float, nargs="?", default=300.0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.target == "python":
        python_campaign(args.seconds, args.jobs, args.seed)
        return 0
    reason = libfuzzer.missing_libfuzzer()
    if reason is not None:
        sys.exit(f"bench/fuzz.py: {reason}")
    build = libfuzzer.build(WORK / "build")
    seeds = fuzz_seeds.write(WORK / "seeds")
    for target in libfuzzer.TARGETS if args.target == "all" else (args.target,):
        campaign(build, seeds, target, args.seconds, args.jobs, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
