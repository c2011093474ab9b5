"""Figures for kiln's runtime on the board: per model, the executor runner's code by part
(runtime core = loader + executor + Ethos-U delegate + driver, each shown, and the error
text beside it), the RAM it uses beyond the planned buffers and the Ethos-U scratch, NPU
PMU cycles and CPU instructions per inference, and the virtual platform's wall time for a
batch of inferences.

    .venv/bin/python bench/runtime.py [--models digits,tiny_cnn,ds_cnn] [--target ethos-u55-128] [--samples 16]
        [--io float|int8] [--profile]
    .venv/bin/python bench/runtime.py --io int8 --models tiny_cnn,ds_cnn,resnet8,mobilenet_v1_025,fc_autoencoder
        (issue 5's instruction goal)

Goals (issue 5): runtime core <= 20 KB of code; RAM beyond planned buffers and scratch
<= 4 KB; for a fully delegated model with int8 inputs and outputs, <= 5,000 CPU
instructions per inference outside the NPU. Instructions are counted on kiln's virtual
platform (kiln.simulator.qemu_plugin): everything the CPU executes in the runner's
per-inference call, Method::execute() (executor, delegate, driver, cache maintenance,
the NPU's interrupt handler; the runner's semihosting input/output and UART lines lie
outside it); the NPU runs while QEMU is stopped, so no waiting is counted. CPU cycles
are counted only where the DWT cycle counter runs (Arm's FVP, hardware).
--profile prints, per model, where the instructions of all its inferences went.
"""

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from kiln import compile as kiln_compile
from kiln import flow
from kiln.firmware import memory_report
from kiln.pte.schema import NUMPY_DTYPES
from kiln.spec import CompileSpec

INSTRUCTION_GOAL = 5_000


def ram_beyond_buffers(report: dict) -> int:
    """Initialised + zeroed bytes of every part except the model's generated buffers,
    plus the value/kernel/delegate tables (the model part's own bss minus its buffers)."""
    parts = report["parts"]
    total = sum(p["data"] + p["bss"] for p in parts.values())
    buffers = sum(b["size"] for b in report["buffers"])
    return total - buffers


def random_sample(tensor, rng) -> np.ndarray:
    dtype = np.dtype(NUMPY_DTYPES[tensor.scalar_type])
    if dtype.kind == "f":
        return rng.uniform(-1, 1, size=tensor.sizes).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=tensor.sizes, endpoint=True).astype(dtype)


def bench(model: str, target: str, samples: int, io: str, profile: bool, work: Path) -> dict:
    pte_path = work / f"{model}.pte"
    compiled = kiln_compile.compile_model(model, CompileSpec(target=target, io=io))
    kiln_compile.write(compiled, pte_path)
    cpu_ops = sum(1 for op in compiled.report["ops"] if op["where"] == "cpu")
    out = work / f"build-{model}"
    elf = flow.build_runner(pte_path, target, output=out, echo=lambda *a, **k: None)
    report = json.loads((out / "memory_report.json").read_text())
    inputs, _ = flow.program_io(pte_path)
    rng = np.random.default_rng(0)
    batch = [[random_sample(t, rng) for t in inputs] for _ in range(samples)]
    result = flow.infer(
        elf,
        target,
        pte_path,
        batch,
        work / f"run-{model}",
        platform="virtual",
        count_instructions=True,
        profile_instructions=profile,
    )
    if result.status != 0 or result.cpu_instructions is None:
        raise SystemExit(f"{model}: the runner exited {result.status}\n{result.log[-4000:]}")
    code = {part: v["code"] for part, v in report["parts"].items()}
    core = {part: v["code"] for part, v in report["core_parts"].items()}
    breakdown = [note for note in result.notes if note.startswith("  ") or note.startswith("instructions inside")]
    return {
        "model": model,
        "pte": report["pte"]["size"],
        "code": code,
        "core": core,
        "ram_extra": ram_beyond_buffers(report),
        "buffers": sum(b["size"] for b in report["buffers"]),
        "npu_cycles": int(np.mean(result.npu_cycles)),
        "instructions": result.cpu_instructions,
        "cpu_ops": cpu_ops,
        "delegates": len(compiled.report["delegates"]),
        "seconds": result.seconds,
        "samples": samples,
        "breakdown": breakdown,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="digits,tiny_cnn,ds_cnn")
    parser.add_argument("--target", default="ethos-u55-128")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument(
        "--io",
        choices=("float", "int8"),
        default="float",
        help="the programs' inputs and outputs (int8: no quantize/dequantize on the CPU)",
    )
    parser.add_argument("--profile", action="store_true", help="where each model's CPU instructions went")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        rows = [bench(m, args.target, args.samples, args.io, args.profile, Path(tmp)) for m in args.models.split(",")]
    print(f"executor runner on {args.target} (kiln's virtual platform), --io {args.io}, bytes:")
    print(
        f"{'model':<16} {'runtime core':>12} {'kernels':>8} {'app+platform':>12} {'.pte':>9} "
        f"{'buffers':>9} {'RAM extra':>9} {'NPU cycles':>10} {'CPU ops':>7} {'CPU instr':>9} {'s/inference':>11}"
    )
    for r in rows:
        c = r["code"]
        other = c.get("runner app", 0) + c.get("platform", 0) + c.get("C/C++ library", 0) + c.get("model", 0)
        instructions = r["instructions"]
        # The same program and a fresh copy of the inputs each time: every inference should count the same.
        shown = (
            f"{instructions[0]:,}"
            if min(instructions) == max(instructions)
            else f"{min(instructions):,}..{max(instructions):,}"
        )
        print(
            f"{r['model']:<16} {c.get('runtime core', 0):>12,} {c.get('kernels', 0):>8,} {other:>12,} "
            f"{r['pte']:>9,} {r['buffers']:>9,} {r['ram_extra']:>9,} {r['npu_cycles']:>10,} {r['cpu_ops']:>7} "
            f"{shown:>9} {r['seconds'] / r['samples']:>11.3f}"
        )
    print(
        "runtime core = loader + executor + EthosUBackend + driver (goal <= 21,024); RAM extra = all data and "
        "bss but the planned buffers and scratch, stack excluded (goal <= 4,096); CPU instr = instructions per "
        "inference in Method::execute() on the virtual platform"
    )
    core_parts = [part for part, _ in memory_report.CORE_PARTS]
    print("\nruntime core by part, bytes of code (text + rodata):")
    print(f"{'model':<16} " + " ".join(f"{p:>9}" for p in core_parts) + f" {'core':>9} {'error text':>10}")
    for r in rows:
        print(
            f"{r['model']:<16} "
            + " ".join(f"{r['core'].get(p, 0):>9,}" for p in core_parts)
            + f" {r['code'].get(memory_report.CORE, 0):>9,} {r['code'].get('error text', 0):>10,}"
        )
    print(
        "loader = Program::load's verification and Program's accessors; executor = Method; error text = every "
        "error's name and the printer, counted apart from the core"
    )
    delegated = [r for r in rows if r["cpu_ops"] == 0]
    if args.io == "int8" and delegated:
        worst = max(delegated, key=lambda r: max(r["instructions"]))
        verdict = "meets" if max(worst["instructions"]) <= INSTRUCTION_GOAL else "misses"
        print(
            f"fully delegated with int8 I/O: at most {max(worst['instructions']):,} CPU instructions per inference "
            f"({worst['model']}); {verdict} the goal of <= {INSTRUCTION_GOAL:,}"
        )
    for r in rows:
        if r["breakdown"]:
            print(f"\n{r['model']}: " + "\n".join(r["breakdown"]))


if __name__ == "__main__":
    main()
