"""Operator coverage of `kiln compile`: what runs on the NPU, what stays on the CPU and why.

    .venv/bin/python bench/coverage.py [--target ethos-u55-128[,ethos-u85-256,...]]
                                       [--models zoo,arch,ops,NAME,...] [--verbose]

Test models: kiln's zoo (kiln.models.MODELS), the architecture models
(kiln.models.ARCHITECTURES) and the single-operator cases of tests/operator_cases.py. For
each model and target, one row: compiled or not (the error's line if not), ops on the NPU and
on the CPU (the float<->int8 quantize/dequantize edges counted apart), the share of MACs on
the NPU, Vela's NPU cycle estimate and the compile time (in-process time of
kiln.compile.compile_model, after one warm-up compile per target). After the table, the CPU
ops of each model grouped by op type with their reasons (--verbose: one line per node), then
a summary: models compiled, NPU and CPU ops in all, the ops most often left on the CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import operator_cases
from kiln import compile as kc
from kiln import models
from kiln.errors import KilnError
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec

EDGES = {"quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor"}
SETS = ("zoo", "arch", "ops")


def test_models() -> list[tuple[str, str, Callable[[], str | LoadedModel]]]:
    """(set, name, what compile_model takes) for every test model, in a fixed order."""
    found: list[tuple[str, str, Callable[[], str | LoadedModel]]] = []
    found += [("zoo", name, lambda name=name: name) for name in models.MODELS]
    found += [("arch", name, lambda name=name: name) for name in models.ARCHITECTURES]
    for name, (make, inputs) in operator_cases.CASES.items():
        found.append(("ops", name, lambda name=name, make=make, inputs=inputs: LoadedModel(name, make().eval(), inputs())))
    return found


def pick(found: list, wanted: str | None) -> list:
    if not wanted:
        return found
    names = wanted.split(",")
    unknown = [n for n in names if n not in SETS and n not in {name for _, name, _ in found}]
    if unknown:
        raise SystemExit(f"coverage.py: unknown model or set {', '.join(unknown)} (sets: {', '.join(SETS)})")
    return [m for m in found if m[0] in names or m[1] in names]


def one_line(error: Exception) -> str:
    """The error's first line; an error that is no KilnError is a crash (a kiln bug), marked so."""
    lines = str(error).strip().splitlines()
    crash = "" if isinstance(error, KilnError) else "CRASH "
    return f"{crash}{type(error).__name__}: {lines[0] if lines else ''}"


def short(op: str) -> str:
    return op.removeprefix("aten.")


def reason_of(op: dict) -> str:
    """The op's reason on one line (Vela's refusals span several)."""
    return " ".join((op["reason"] or "no reason given").split())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ethos-u55-128", help="a target or a comma list")
    parser.add_argument("--models", default=None, help="comma list of model names and sets (zoo, arch, ops)")
    parser.add_argument("--verbose", action="store_true", help="every CPU op by node, not grouped")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # torch.export's notes on the models' code: not this table's business
    chosen = pick(test_models(), args.models)
    quiet = lambda line: None
    status = 0
    for target in args.target.split(","):
        start = time.perf_counter()
        kc.compile_model("digits", CompileSpec(target), log=quiet)  # warm-up, not measured
        warm = time.perf_counter() - start
        print(f"kiln compile, {target} (board default system config and memory mode); warm-up {warm:.1f} s")
        header = (f"{'model':24} {'set':4} {'compiled':8} {'NPU ops':>7} {'CPU ops':>7} {'q/dq':>5} "
                  f"{'NPU MACs':>9} {'NPU cycles':>11} {'compile s':>9}  CPU op types / error")
        print(header)
        print("-" * len(header))
        failures: list[tuple[str, str]] = []
        listing: list[str] = []
        compiled = npu_total = cpu_total = edge_total = 0
        left: Counter = Counter()  # op type -> CPU nodes over all models
        reasons: dict[str, Counter] = defaultdict(Counter)  # op type -> reason -> nodes
        seconds_total = 0.0
        for group, name, load in chosen:
            start = time.perf_counter()
            try:
                report = kc.compile_model(load(), CompileSpec(target), log=quiet).report
            except Exception as error:  # noqa: BLE001 (every failure is a finding: keep going)
                seconds = time.perf_counter() - start
                seconds_total += seconds
                failures.append((name, one_line(error)))
                print(f"{name:24} {group:4} {'no':8} {'-':>7} {'-':>7} {'-':>5} {'-':>9} {'-':>11} {seconds:9.2f}  "
                      f"{one_line(error)}", flush=True)
                continue
            seconds = time.perf_counter() - start
            seconds_total += seconds
            compiled += 1
            npu = [o for o in report["ops"] if o["where"] == "npu"]
            edges = [o for o in report["ops"] if o["op"] in EDGES]
            cpu = [o for o in report["ops"] if o["where"] == "cpu" and o["op"] not in EDGES]
            npu_total += len(npu)
            cpu_total += len(cpu)
            edge_total += len(edges)
            by_type: dict[str, Counter] = defaultdict(Counter)
            for o in cpu:
                by_type[short(o["op"])][reason_of(o)] += 1
                left[short(o["op"])] += 1
                reasons[short(o["op"])][reason_of(o)] += 1
            share = report["macs"]["npu_share"]
            share_text = "-" if share is None else f"{100 * share:.1f}%"
            types = ", ".join(f"{op} x{sum(r.values())}" if sum(r.values()) > 1 else op for op, r in by_type.items())
            print(f"{name:24} {group:4} {'yes':8} {len(npu):7} {len(cpu):7} {len(edges):5} {share_text:>9} "
                  f"{report['npu_cycles']:11,} {seconds:9.2f}  {types or '-'}", flush=True)
            if args.verbose:
                listing += [f"  {name}: {o['node']} ({short(o['op'])}): {reason_of(o)}" for o in cpu]
            else:
                for op, rs in by_type.items():
                    for reason, n in rs.items():
                        listing.append(f"  {name}: {op}{f' x{n}' if n > 1 else ''}: {reason}")
        print("-" * len(header))
        if listing:
            print("CPU ops (besides the quantize/dequantize edges) and why they stay there:")
            print("\n".join(listing))
        if failures:
            status = 1
            print("not compiled:")
            print("\n".join(f"  {name}: {line}" for name, line in failures))
        print(f"summary {target}: {compiled}/{len(chosen)} models compiled in {seconds_total:.1f} s; "
              f"{npu_total} ops on the NPU, {cpu_total} on the CPU (+ {edge_total} quantize/dequantize edges)")
        if left:
            print("most often on the CPU:")
            for op, n in left.most_common(10):
                why = "; ".join(f"{reason} ({k})" if len(reasons[op]) > 1 else reason
                                for reason, k in reasons[op].most_common(3))
                others = len(reasons[op]) - 3
                more = f"; and {others} other reason{'s' if others > 1 else ''}" if others > 0 else ""
                print(f"  {op} x{n}: {why}{more}")
        print()
    return status


if __name__ == "__main__":
    sys.exit(main())
