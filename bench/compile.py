"""Compile-time and NPU-placement benchmark of `kiln compile` against ExecuTorch 1.5.1.

Run: .venv/bin/python bench/compile.py [--target ethos-u55-128]
     .venv/bin/python bench/compile.py --architectures [--models resnet18,transformers,...] [--runs 3] [--executorch]

Default: per MLPerf Tiny model, kiln's compile time (imports and one warm-up compile of
another model excluded, so lazy imports inside torch do not count), the share of MACs on
the NPU, what stays on the CPU besides the float<->int8 edges, and Vela's NPU cycle
estimate, beside ExecuTorch 1.5.1's figures measured on this machine kind
(../shared/notes/peers.md).

--architectures: whole-process compile times, start-up and imports included, as a user
meets them: `kiln compile NAME --target T --output F.pte` as a process (the median of
--runs runs after one warm-up run), for the architecture models and two zoo models (or --models: names of
the zoo, the architectures and the transformer zoo, and the sets zoo, arch and transformers), beside
ExecuTorch 1.5.1's `python -m executorch.backends.arm.scripts.aot_arm_compiler
--model_name NAME.py --delegate --quantize --target T --system_config S --memory_mode M` (kiln's board
defaults for T) measured the same way (EXECUTORCH_PROCESS: date, runs and machine kind there; ethos-u55-128
only; the transformer zoo's in EXECUTORCH_TRANSFORMERS_PROCESS, per target). The CLI takes the transformers
as they are: NAME.py gives it kiln.models.load's module and its tuple of example inputs (several inputs,
int64 token ids and masks), which it exports, calibrates on and lowers as given. With
--executorch the bench runs ExecuTorch's CLI here too (needs .venv-executorch:
./scripts/executorch_env.sh), the two in turn (kiln, ExecuTorch, kiln, ...), and prints the
ratio pair by pair. Vela's NPU cycles come from kiln's .json report and ExecuTorch's log.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln import compile as kc
from kiln.spec import CompileSpec

# ExecuTorch 1.5.1, ethos-u55-128 / Shared_Sram: (AOT seconds, Vela NPU cycles, left on CPU)
EXECUTORCH = {
    "tiny_cnn": (2.4, 1961, "-"),
    "ds_cnn": (5.1, 87341, "avg_pool2d"),
    "resnet8": (6.9, 192325, "avg_pool2d"),
    "mobilenet_v1_025": (12.1, 218057, "-"),
    "fc_autoencoder": (6.1, 41404, "-"),
}
EDGES = {"quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor"}

# ExecuTorch 1.5.1's aot_arm_compiler --delegate --quantize --target ethos-u55-128 (its defaults
# Ethos_U55_High_End_Embedded / Shared_Sram, kiln's board defaults too), WHOLE PROCESS (Python start-up
# and imports included), measured 2026-11-25 on this machine kind (a 2-core AMD EPYC VM shared with other
# jobs, so medians, alternating with kiln's command run for run): model -> (median wall s, runs, Vela NPU
# cycles summed over its delegates (its Vela is 5.1.0), delegates, what stays on the CPU besides the
# quantize/dequantize edges).
EXECUTORCH_PROCESS = {
    "resnet18": (43.9, 3, 261974, 1, "-"),
    "mobilenet_v3_small": (61.3, 3, 170764, 4, "hardsigmoid x3"),
    "vit_tiny": (77.8, 3, 290847, 1, "-"),
    "kwt": (49.6, 3, 705249, 1, "-"),
    "tc_resnet8": (27.2, 3, 22757, 2, "mean.dim, squeeze_copy, unsqueeze_copy"),
    "kws_gru": (78.9, 3, 34985, 1, "-"),
    "resnet8": (20.5, 3, 202754, 2, "avg_pool2d"),
    "ds_cnn": (19.3, 3, 105423, 2, "avg_pool2d"),
}
# The transformer zoo (kiln.models.TRANSFORMERS) the same way, per target (kiln's board defaults for both):
# target -> model -> the tuple above. Measured: see the comment above each target's figures.
EXECUTORCH_TRANSFORMERS_PROCESS: dict[str, dict[str, tuple[float, int, int, int, str]]] = {}
ROOT = Path(__file__).resolve().parent.parent
ET_PYTHON = ROOT / ".venv-executorch" / "bin" / "python"
SETS = {"zoo": "MODELS", "arch": "ARCHITECTURES", "transformers": "TRANSFORMERS"}  # --models set -> kiln.models
# A model file for ExecuTorch's CLI (ModelUnderTest, ModelInputs): kiln's own model, imported from the
# checkout, so ExecuTorch's environment needs no kiln installed.
ET_WRAPPER = """import sys
sys.path.insert(0, {compiler!r})
import kiln
kiln.__path__.append({models!r})  # kiln.models lives beside the compiler in a checkout
from kiln.models import load
ModelUnderTest, ModelInputs = load({name!r})
"""


def run_seconds(command: list[str], log: Path) -> tuple[float, int]:
    """Wall seconds of one whole process and its exit status (its output appended to `log`)."""
    with log.open("a") as out:
        start = time.perf_counter()
        status = subprocess.run(
            command, check=False, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        ).returncode
        return time.perf_counter() - start, status


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def executorch_run(log: Path) -> tuple[int | None, int | None, str]:
    """Vela's NPU cycles summed over the delegates of ExecuTorch's last run in `log`, its delegates, and
    the ops its delegation summary leaves on the CPU besides the quantize/dequantize edges and getitem."""
    runs = log.read_text(errors="replace").split("PTE file saved")
    last = runs[-2] if len(runs) > 1 else runs[-1]
    cycles = sum(int(n) for n in re.findall(r"^NPU cycles\s+(\d+) cycles/batch", last, re.MULTILINE))
    left = [
        f"{op}{f' x{n}' if n != '1' else ''}"
        for op, n in re.findall(r"^\s+- (\w+): (\d+)$", last.split("Non-delegated operators")[-1], re.MULTILINE)
        if op != "getitem" and not re.match(r"cortex_m_(de)?quantize_per_tensor", op)
    ]
    delegates = re.findall(r"Delegated partitions for silicon acceleration: (\d+)", last)
    return cycles or None, int(delegates[-1]) if delegates else None, ", ".join(left) or "-"


def architectures(args) -> int:
    """Whole-process compile times of kiln (and ExecuTorch's CLI with --executorch)."""
    from kiln import models

    names = [
        name
        for wanted in (args.models.split(",") if args.models else EXECUTORCH_PROCESS)
        for name in (getattr(models, SETS[wanted]) if wanted in SETS else [wanted])
    ]
    unknown = [n for n in names if models.find(n) is None]
    if unknown:
        raise SystemExit(f"compile.py: not a zoo, architecture or transformer model or set: {', '.join(unknown)}")
    if args.executorch and not ET_PYTHON.is_file():
        raise SystemExit(f"compile.py: --executorch needs {ET_PYTHON} (./scripts/executorch_env.sh makes it)")
    kiln_cli = Path(sys.executable).parent / "kiln"
    stored_figures = {
        **(EXECUTORCH_PROCESS if args.target == "ethos-u55-128" else {}),
        **EXECUTORCH_TRANSFORMERS_PROCESS.get(args.target, {}),
    }
    print(
        f"whole-process compile, {args.target}: median of {args.runs} runs after one warm-up run; "
        f"ET {'measured now, in turn with kiln' if args.executorch else 'from EXECUTORCH_PROCESS (2026-11-25)'}"
    )
    header = (
        f"{'model':20} {'kiln s':>7} {'ET s':>6} {'kiln/ET':>8} {'runs':>5} {'kiln cycles':>12} {'ET cycles':>10} "
        f"{'delegates':>9}  on the CPU besides q/dq (kiln | ET) / errors"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="kiln-compile-bench-") as folder:
        status = compare(names, args, kiln_cli, stored_figures, Path(folder))
    print(
        "kiln/ET: the median of the pairwise ratios with --executorch, else kiln's median over the stored ET median;"
        " runs: kiln's[/ET's]; delegates: kiln's/ET's."
    )
    return status


def compare(names: list[str], args, kiln_cli: Path, stored_figures: dict, work: Path) -> int:
    status = 0
    for name in names:
        pte = work / f"{name}.pte"
        kiln_command = [str(kiln_cli), "compile", name, "--target", args.target, "--output", str(pte)]
        kiln_log, et_log = work / f"{name}.kiln.log", work / f"{name}.et.log"
        et_command = []
        if args.executorch:
            spec = CompileSpec(args.target).resolved()
            wrapper = work / f"{name}.py"
            wrapper.write_text(
                ET_WRAPPER.format(compiler=str(ROOT / "compiler"), models=str(ROOT / "models" / "kiln"), name=name)
            )
            et_command = [
                str(ET_PYTHON),
                "-m",
                "executorch.backends.arm.scripts.aot_arm_compiler",
                "--model_name",
                str(wrapper),
                "--delegate",
                "--quantize",
                "--target",
                args.target,
                "--system_config",
                spec.system_config,
                "--memory_mode",
                spec.memory_mode,
                "--output",
                str(work / f"{name}.et.pte"),
            ]
        kiln_s, et_s, ratios, errors = [], [], [], []
        for n in range(args.runs + 1):  # the first run of each is the warm-up
            k, k_status = run_seconds(kiln_command, kiln_log)
            e, e_status = run_seconds(et_command, et_log) if et_command else (None, 0)
            if k_status:
                errors.append(f"kiln exit {k_status}: {last_line(kiln_log)}")
            if e_status:
                errors.append(f"ET exit {e_status}: {last_line(et_log)}")
            if errors:
                break
            if n:
                kiln_s.append(k)
                if e is not None:
                    et_s.append(e)
                    ratios.append(k / e)
        stored = stored_figures.get(name)
        if errors:
            status = 1
            print(f"{name:20} {'-':>7} {'-':>6} {'-':>8} {'-':>5} {'-':>12} {'-':>10} {'-':>9}  {'; '.join(errors)}")
            continue
        kiln_median = statistics.median(kiln_s)
        if et_s:
            et_median, ratio = statistics.median(et_s), statistics.median(ratios)
            et_cycles, et_delegates, et_cpu = executorch_run(et_log)
            runs = f"{len(kiln_s)}"
        elif stored:
            et_median, ratio, et_cycles, et_delegates, et_cpu = (
                stored[0],
                kiln_median / stored[0],
                stored[2],
                stored[3],
                stored[4],
            )
            runs = f"{len(kiln_s)}/{stored[1]}"
        else:
            et_median = ratio = et_cycles = et_delegates = None
            et_cpu, runs = "no ExecuTorch figure (--executorch measures one)", f"{len(kiln_s)}"
        report = json.loads(pte.with_suffix(".json").read_text())
        cpu = sorted({o["op"].split(".")[-1] for o in report["ops"] if o["where"] == "cpu" and o["op"] not in EDGES})

        def fmt(value, spec):
            return "-" if value is None else format(value, spec)

        delegates = f"{len(report['delegates'])}/{fmt(et_delegates, 'd')}"
        print(
            f"{name:20} {kiln_median:7.2f} {fmt(et_median, '6.1f')} {fmt(ratio, '8.2f')} {runs:>5} "
            f"{report['npu_cycles']:12,} {fmt(et_cycles, '10,')} {delegates:>9}  {', '.join(cpu) or '-'} | {et_cpu}",
            flush=True,
        )
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ethos-u55-128")
    parser.add_argument(
        "--architectures",
        action="store_true",
        help="whole-process times of `kiln compile` on the architecture models (or --models) against ExecuTorch's CLI",
    )
    parser.add_argument(
        "--models", default=None, help="with --architectures: a comma list of models and sets (zoo, arch, transformers)"
    )
    parser.add_argument("--runs", type=int, default=3, help="with --architectures: counted runs per command")
    parser.add_argument(
        "--executorch",
        action="store_true",
        help="with --architectures: run ExecuTorch's CLI now too (.venv-executorch)",
    )
    args = parser.parse_args()
    if args.architectures:
        return architectures(args)

    def quiet(line):
        pass

    kc.compile_model("digits", CompileSpec(args.target), log=quiet)  # warm-up, not measured
    print(f"kiln compile, {args.target} (board default system config and memory mode)")
    header = (
        f"{'model':18} {'kiln s':>7} {'ET s':>6} {'kiln/ET':>8} {'NPU MACs':>9} {'CPU ops':>12} "
        f"{'kiln cycles':>12} {'ET cycles':>10} {'cycles ratio':>12}"
    )
    print(header)
    print("-" * len(header))
    for name, (et_seconds, et_cycles, _et_cpu) in EXECUTORCH.items():
        start = time.perf_counter()
        result = kc.compile_model(name, CompileSpec(args.target), log=quiet)
        seconds = time.perf_counter() - start
        report = result.report
        cpu = sorted({o["op"].split(".")[-1] for o in report["ops"] if o["where"] == "cpu" and o["op"] not in EDGES})
        print(
            f"{name:18} {seconds:7.2f} {et_seconds:6.1f} {seconds / et_seconds:8.2f} "
            f"{100 * report['macs']['npu_share']:8.1f}% {', '.join(cpu) or '-':>12} "
            f"{report['npu_cycles']:12,} {et_cycles:10,} {report['npu_cycles'] / et_cycles:12.3f}"
        )
    print(
        "ET: ExecuTorch 1.5.1's Arm flow on this machine kind; its CPU ops for ds_cnn and resnet8:"
        " the final avg_pool2d."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
