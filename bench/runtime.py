"""Figures for kiln's runtime on the board: per model, the executor runner's code by part
(runtime core = loader + executor + Ethos-U delegate + driver), the RAM it uses beyond
the planned buffers and the Ethos-U scratch, NPU PMU cycles per inference and the
virtual platform's wall time for a batch of inferences.

    .venv/bin/python bench/runtime.py [--models digits,tiny_cnn,ds_cnn] [--target ethos-u55-128] [--samples 16]

Goals (issue 5): runtime core <= 20 KB of code; RAM beyond planned buffers and scratch
<= 4 KB. CPU cycles are counted only where the DWT cycle counter runs (Arm's FVP,
hardware); kiln's virtual platform does not model it.
"""

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from kiln import compile as kiln_compile
from kiln import runner_build, runner_run
from kiln.spec import CompileSpec


def ram_beyond_buffers(report: dict) -> int:
    """Initialised + zeroed bytes of every part except the model's generated buffers,
    plus the value/kernel/delegate tables (the model part's own bss minus its buffers)."""
    parts = report["parts"]
    total = sum(p["data"] + p["bss"] for p in parts.values())
    buffers = sum(b["size"] for b in report["buffers"])
    return total - buffers


def bench(model: str, target: str, samples: int, work: Path) -> dict:
    pte_path = work / f"{model}.pte"
    kiln_compile.write(kiln_compile.compile_model(model, CompileSpec(target=target)), pte_path)
    out = work / f"build-{model}"
    elf = runner_build.build_runner(pte_path, target, output=out, echo=lambda *a, **k: None)
    report = json.loads((out / "memory_report.json").read_text())
    inputs, _ = runner_run.program_io(pte_path)
    rng = np.random.default_rng(0)
    batch = [[rng.uniform(-1, 1, size=t.sizes).astype(np.float32) for t in inputs] for _ in range(samples)]
    result = runner_run.run(elf, target, pte_path, batch, work / f"run-{model}", platform="virtual")
    if result.status != 0:
        raise SystemExit(f"{model}: the runner exited {result.status}\n{result.stdout[-2000:]}")
    code = {part: v["code"] for part, v in report["parts"].items()}
    return {"model": model, "pte": report["pte"]["size"], "code": code, "ram_extra": ram_beyond_buffers(report),
            "buffers": sum(b["size"] for b in report["buffers"]), "npu_cycles": int(np.mean(result.npu_cycles)),
            "seconds": result.seconds, "samples": samples}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="digits,tiny_cnn,ds_cnn")
    parser.add_argument("--target", default="ethos-u55-128")
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        rows = [bench(m, args.target, args.samples, Path(tmp)) for m in args.models.split(",")]
    print(f"executor runner on {args.target} (kiln's virtual platform), bytes:")
    print(f"{'model':<12} {'runtime core':>12} {'kernels':>8} {'app+platform':>12} {'.pte':>9} "
          f"{'buffers':>9} {'RAM extra':>9} {'NPU cycles':>10} {'s/inference':>11}")
    for r in rows:
        c = r["code"]
        other = c.get("runner app", 0) + c.get("platform", 0) + c.get("C/C++ library", 0) + c.get("model", 0)
        print(f"{r['model']:<12} {c.get('runtime core', 0):>12,} {c.get('kernels', 0):>8,} {other:>12,} "
              f"{r['pte']:>9,} {r['buffers']:>9,} {r['ram_extra']:>9,} {r['npu_cycles']:>10,} "
              f"{r['seconds'] / r['samples']:>11.3f}")
    print("runtime core = loader + executor + EthosUBackend + driver (goal <= 20,480); RAM extra = all data and "
          "bss but the planned buffers and scratch, stack excluded (goal <= 4,096)")


if __name__ == "__main__":
    main()
