"""Long differential fuzz of kiln's NPU model against tosa_reference_model.

    .venv/bin/python bench/npu_fuzz.py [--cases 2000] [--first-seed 50000] [--per-graph 10]
                                       [--targets ethos-u55-128,...] [--kinds conv,add_sub,...] [--u85]

Batches of random single-op TOSA graphs (tests/simulator/npu_cases.py) are compiled by
Vela for each target in turn (memory mode alternating between the target's two) and
compared bit for bit. Every batch prints its seed; a failing case prints its (seed, case)
pair, which helpers.build_batch(seed, [case]) rebuilds. --u85 fuzzes the Ethos-U85
configurations instead, with the U85-only kinds of npu_u85_cases added (a case is then
rebuilt by build_batch(seed, [case], generators=npu_u85_fuzz_generators()))."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests.simulator

from tests.simulator import helpers  # noqa: E402

TARGETS = ["ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512"]
TARGETS_U85 = ["ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048"]


def modes(target: str) -> tuple[str, str]:
    if target.startswith("ethos-u85"):
        return "Shared_Sram", "Dedicated_Sram_384KB"
    return ("Shared_Sram", "Dedicated_Sram") if target.startswith("ethos-u65") else ("Shared_Sram", "Sram_Only")


def npu_u85_fuzz_generators() -> dict:
    from tests.simulator import npu_cases, npu_u85_cases

    return {**npu_cases.GENERATORS, **npu_u85_cases.GENERATORS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--first-seed", type=int, default=50000)
    parser.add_argument("--per-graph", type=int, default=10)
    parser.add_argument("--targets", default=None, help="default: the U55/U65 configurations (--u85: the U85's)")
    parser.add_argument("--kinds", default=None)
    parser.add_argument("--u85", action="store_true", help="Ethos-U85 targets and the U85-only kinds")
    args = parser.parse_args()
    targets = args.targets.split(",") if args.targets else (TARGETS_U85 if args.u85 else TARGETS)
    generators = npu_u85_fuzz_generators() if args.u85 else None
    kinds = args.kinds.split(",") if args.kinds else None
    start = time.time()
    compared = failed = rejected = 0
    seed = args.first_seed
    while compared < args.cases:
        target = targets[seed % len(targets)]
        mode = modes(target)[(seed // len(targets)) % 2]
        try:
            results, refused = helpers.run_batch(seed, args.per_graph, target, mode, kinds, generators)
        except AssertionError as error:  # the model faulted or an output size differed
            failed += 1
            print(f"seed {seed} {target} {mode}: FAULT {error}", flush=True)
            seed += 1
            continue
        rejected += len(refused)
        bad = [(d, diff) for d, diff in results if diff]
        compared += len(results)
        failed += len(bad)
        print(
            f"seed {seed} {target} {mode}: {len(results)} compared, {len(bad)} differ, {len(refused)} refused by Vela",
            flush=True,
        )
        for description, diff in bad:
            print(f"  DIFF {diff}: {description}", flush=True)
        seed += 1
    print(
        f"{compared} cases compared, {failed} failed, {rejected} refused by Vela, seeds "
        f"{args.first_seed}..{seed - 1}, {time.time() - start:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
