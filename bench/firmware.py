"""Figures for kiln's firmware: size per app, the executor runner's code by part (the
runtime core's goal: <= 21,024 bytes) and the .pte it bakes, and the virtual platform's
wall time from QEMU start to the firmware's exit.

    .venv/bin/python bench/firmware.py [--runs N] [--models digits,mobilenet_v2] [--target ethos-u55-128]
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from elftools.elf.elffile import ELFFile

from kiln.firmware import build as firmware
from kiln.firmware import memory_report, runner_build
from kiln.simulator import run

CORE_GOAL = 20_480  # bytes of code: loader + executor + Ethos-U delegate + driver


def sizes(elf: Path) -> tuple[int, int, int]:
    """(code+rodata, initialised data, zeroed data + stack) in bytes."""
    text = data = bss = 0
    with open(elf, "rb") as stream:
        for section in ELFFile(stream).iter_sections():
            if not section["sh_flags"] & 0x2:  # SHF_ALLOC
                continue
            if section["sh_type"] == "SHT_NOBITS":
                bss += section["sh_size"]
            elif section["sh_flags"] & 0x1:  # SHF_WRITE
                data += section["sh_size"]
            else:
                text += section["sh_size"]
    return text, data, bss


def runner_report(model: str, target: str, work: Path) -> dict:
    """The memory report of the executor runner built for `model` compiled for `target`."""
    from kiln import compile as kiln_compile  # torch: only when a runner is built
    from kiln.spec import CompileSpec

    pte_path = work / f"{model}.pte"
    kiln_compile.write(kiln_compile.compile_model(model, CompileSpec(target=target)), pte_path)
    out = work / f"runner-{model}"
    runner_build.build_runner(pte_path, target, output=out, echo=lambda *a, **k: None)
    return json.loads((out / "memory_report.json").read_text())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", default="digits", help="executor runners to build (comma-separated zoo models)")
    parser.add_argument("--target", default="ethos-u55-128")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        build = firmware.build("corstone-300", Path(tmp), test_apps=True)
        elves = [build / "hello.elf", *sorted((build / "test-apps").glob("*.elf"))]
        print(f"{'app':28} {'code B':>8} {'data B':>8} {'bss+stack B':>12}")
        for elf in elves:
            print(f"{elf.stem:28} {sizes(elf)[0]:8} {sizes(elf)[1]:8} {sizes(elf)[2]:12}")

        reports = [runner_report(model, args.target, Path(tmp)) for model in args.models.split(",") if model]
        if reports:
            parts = [
                name
                for name in [p for p, _ in memory_report.PARTS] + ["runner app"]
                if any(name in r["parts"] for r in reports)
            ]
            print(f"\nexecutor runner on {args.target}, code (text + rodata) by part, bytes:")
            print(f"{'model':16} " + " ".join(f"{p:>13}" for p in parts) + f" {'.pte file':>11} {'.pte baked':>11}")
            for r in reports:
                code = " ".join(f"{r['parts'].get(p, {}).get('code', 0):>13,}" for p in parts)
                print(f"{r['model']:16} {code} {r['pte']['file_size']:>11,} {r['pte']['size']:>11,}")
            worst = max(r["parts"]["runtime core"]["code"] for r in reports)
            print(
                f"runtime core = loader + executor + EthosUBackend + driver: at most {worst:,} bytes "
                f"({'within' if worst <= CORE_GOAL else 'over'} the goal of {CORE_GOAL:,}); error text = every "
                "error's name and the printer; .pte baked = without run-host's reference TOSA graphs"
            )

        walls = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = run.run(build / "hello.elf", "ethos-u55-128", platform="virtual")
            walls.append(time.perf_counter() - start)
            assert result.status == 0, result.uart
        print(
            f"\nhello on the virtual platform, start to exit: median {statistics.median(walls) * 1000:.0f} ms "
            f"over {args.runs} runs (min {min(walls) * 1000:.0f}, max {max(walls) * 1000:.0f})"
        )


if __name__ == "__main__":
    main()
