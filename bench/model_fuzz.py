"""Differential model fuzzer: random small PyTorch models (tests/compiler/random_models.py) compiled
by kiln and run on `kiln run-host`, against the PT2E reference.

    .venv/bin/python bench/model_fuzz.py [--graphs 1000] [--first-seed 0]
                                         [--targets ethos-u55-128,ethos-u65-256] [--firmware 0]

Each graph is compiled for the targets in turn. A graph fails when the compile or run raises
(an error: always a defect); it is beyond tolerance when fewer than 95 % of an output's
elements are within 2 quantization steps of the reference (each NPU op may round one step
away from PT2E, and steep tables after it can carry that on: look at each such graph).
`--firmware N` also builds the executor runner for the first N graphs that compile and runs it
on the virtual platform, which must equal run-host bit for bit. Prints one line per failure
(with its seed: random_models.generate(seed) rebuilds the model) and a summary: graphs,
failures, ops placed on the NPU and the CPU, graphs per second.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests.compiler

from tests.compiler import random_models  # noqa: E402


def firmware_matches_host(pte_path: Path, target: str, work: Path) -> str | None:
    """None when the firmware's outputs equal run-host's bit for bit, else what differed."""
    import numpy as np

    from kiln import flow
    from kiln.reference import run_host as host

    elf = flow.build_runner(pte_path, target, output=work / "build", echo=lambda *line, **kwargs: None)
    inputs, _ = flow.program_io(pte_path)
    rng = np.random.default_rng(0)
    sample = [rng.uniform(-1, 1, t.sizes).astype(np.float32) for t in inputs]
    result = flow.infer(elf, target, pte_path, [sample], work, platform="virtual", timeout=300)
    if result.status != 0:
        return f"firmware exit status {result.status}"
    for n, (got, want) in enumerate(zip(result.outputs[0], host.run(pte_path.read_bytes(), sample))):
        if got.tobytes() != np.ascontiguousarray(want).tobytes():
            return f"output {n} differs from run-host"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=1000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--targets", default="ethos-u55-128,ethos-u65-256")
    parser.add_argument("--firmware", type=int, default=0, help="graphs also run on the virtual platform")
    args = parser.parse_args()
    targets = args.targets.split(",")
    start = time.time()
    failures: list[str] = []  # errors and firmware differences
    beyond: list[str] = []  # outside the tolerance
    placed: Counter = Counter()
    firmware_runs = 0
    with tempfile.TemporaryDirectory(prefix="kiln-model-fuzz-") as tmp:
        for n in range(args.graphs):
            seed = args.first_seed + n
            target = targets[n % len(targets)]
            pte_path = Path(tmp) / f"fuzz{seed}.pte"
            outcome = random_models.check(seed, target, pte_path)
            placed["npu"] += outcome.npu_ops
            placed["cpu"] += outcome.cpu_ops
            if outcome.error is not None:
                failures.append(outcome.line())
                print("FAIL " + outcome.line(), flush=True)
            elif outcome.failed:
                beyond.append(outcome.line())
                print("BEYOND TOLERANCE " + outcome.line(), flush=True)
            elif firmware_runs < args.firmware:
                firmware_runs += 1
                differs = firmware_matches_host(pte_path, target, Path(tmp))
                if differs is not None:
                    failures.append(f"seed {seed} {target}: {differs}")
                    print(f"FAIL seed {seed} {target}: {differs}", flush=True)
            if (n + 1) % 50 == 0:
                print(f"{n + 1} graphs, {len(failures)} failures, {time.time() - start:.0f} s", flush=True)
    elapsed = time.time() - start
    print(
        f"graphs: {args.graphs} (seeds {args.first_seed}..{args.first_seed + args.graphs - 1}, "
        f"targets {', '.join(targets)})"
    )
    print(f"failures (errors, firmware differences): {len(failures)}")
    print(f"beyond tolerance: {len(beyond)}")
    print(f"ops: {placed['npu']} on the NPU, {placed['cpu']} on the CPU")
    print(f"firmware runs on the virtual platform: {firmware_runs}")
    print(f"time: {elapsed:.0f} s, {args.graphs / elapsed:.2f} graphs/s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
