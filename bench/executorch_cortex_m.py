"""ExecuTorch 1.5.1's Cortex-M programs on kiln, model by model: each through ExecuTorch's own flow
for cortex-m55 (scripts/make_executorch_cortex_m_fixtures.sh: a bundle of the model's example input
and the output of ExecuTorch's PT2E reference), then `kiln run-host` and kiln's runner on the
virtual platform (QEMU's AN547) against the bundle. Prints one row a model: its operators, the
output step (the scale of its dequantized output), max |diff| from the bundle's output on the host
and on the device, in steps, and the instructions of an inference (Method::execute).

    .venv/bin/python bench/executorch_cortex_m.py [--out build/et-cm] [MODEL ...]

MODEL as the fixtures script takes it (a zoo model, or ops: tests/fixtures/executorch/ops.py);
bundles already in --out are kept. The zoo's larger models take minutes to export and run, which
is why the suite (tests/fvp/test_executorch_cortex_m.py) holds only ds_cnn, resnet8 and ops.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from kiln.pte.bundle import deserialize_bundle
from kiln.pte.reader import deserialize
from kiln.reference import run_host

ROOT = Path(__file__).resolve().parents[1]
KILN = ROOT / ".venv" / "bin" / "kiln"
TARGET = "cortex-m55"
EXECUTE = "_ZN4kiln7runtime6Method7executeEv"
MODELS = ("ds_cnn", "resnet8", "mobilenet_v1_025", "fc_autoencoder", "digits", "ops")


def check(*command: str) -> str:
    """The command's output (stdout, then stderr, where kiln run prints the instruction counts)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def measure(bpte: Path) -> dict:
    bundle = deserialize_bundle(bpte.read_bytes())
    plan = deserialize(bundle.program).forward()
    last = plan.chains[0].instructions[-1]
    step = plan.values[last.args[1]].value  # the output's dequantize
    (case,) = bundle.suites[0].cases
    (got,) = run_host.run(bundle.program, [t.array() for t in case.inputs])
    (want,) = [t.array() for t in case.expected_outputs]
    host = float(np.abs(got.astype(np.float64) - want).max())
    built = subprocess.run([str(KILN), "build", f"--pte={bpte}", f"--target={TARGET}"], capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"kiln build {bpte} failed:\n{built.stdout}{built.stderr}")
    elf = Path(built.stdout.strip().splitlines()[-1])
    atol = f"{host * 1.001 + 1e-6:.6f}"
    uart = check(
        str(KILN), "run", f"--elf={elf}", f"--target={TARGET}", f"--atol={atol}", f"--count-instructions={EXECUTE}"
    )
    device = float(re.search(r"output 0: max \|diff\| (\S+)", uart).group(1))
    instructions = int(re.search(r"per call of kiln::runtime::Method::execute\(\): (\d+)", uart).group(1))
    assert "bundle: PASS" in uart, uart
    operators = sorted({o.name for o in plan.operators})
    return {"step": step, "host": host, "device": device, "instructions": instructions, "operators": operators}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "et-cm")
    parser.add_argument("models", nargs="*", default=MODELS)
    args = parser.parse_args()
    missing = [m for m in args.models if not (args.out / f"{m}_arm_{TARGET}.bpte").exists()]
    if missing:
        check(str(ROOT / "scripts" / "make_executorch_cortex_m_fixtures.sh"), str(args.out), *missing)
    print("| model | output step | max diff run-host | runner | steps | instructions / inference | operators |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for model in args.models:
        m = measure(args.out / f"{model}_arm_{TARGET}.bpte")
        names = ", ".join(n.removeprefix("cortex_m::") for n in m["operators"])
        steps = round(m["host"] / m["step"])
        print(
            f"| {model} | {m['step']:.6f} | {m['host']:.6f} | {m['device']:.6f} | {steps} "
            f"| {m['instructions']:,} | {names} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
