"""Builds the digits runner for every board (or the ones named) and prints, per board, its NPU
configuration, the memory mode, the compile and build wall times and the bytes each memory
region holds: the check that every board description builds (issue 16's boards; the suite
builds two of them, tests/firmware/test_board_builds.py).

    .venv/bin/python bench/boards.py [--boards mps4-corstone320,alif-e7-hp] [--work DIR]

A board is built for its first NPU configuration, compiled with the board's defaults (kiln compile --board).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from kiln import boards
from kiln import compile as kiln_compile
from kiln.firmware import runner_build
from kiln.spec import CompileSpec


def build(board: boards.Board, work: Path, compiled: dict) -> dict:
    target = board.target(board.configurations()[0])
    key = (target.name, target.memory_mode)
    started = time.perf_counter()
    if key not in compiled:
        compiled[key] = work / f"digits-{target.name}-{target.memory_mode}.pte"
        kiln_compile.write(
            kiln_compile.compile_model("digits", CompileSpec(target.name, board=board.name)), compiled[key]
        )
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    elf = runner_build.build_runner(compiled[key], target, output=work / board.name, echo=lambda *args, **kwargs: None)
    build_s = time.perf_counter() - started
    report = json.loads((elf.parent.parent / "memory_report.json").read_text())
    used = {
        name: r["image"] + r["uninitialised"]
        for name, r in report["regions"].items()
        if r["image"] + r["uninitialised"]
    }
    return {
        "board": board.name,
        "target": target.name,
        "memory_mode": target.memory_mode,
        "compile_s": compile_s,
        "build_s": build_s,
        "used": used,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--boards", help="comma-separated board names (default: every board)")
    parser.add_argument("--work", type=Path, help="where the .pte files and builds go (default: a temporary folder)")
    args = parser.parse_args()
    names = args.boards.split(",") if args.boards else boards.board_names()
    with tempfile.TemporaryDirectory(prefix="kiln-boards-") as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        compiled: dict = {}
        print(f"{'board':18} {'target':15} {'memory mode':21} {'compile':>8} {'build':>7}  bytes per region")
        for name in names:
            row = build(boards.load(name), work, compiled)
            regions = ", ".join(f"{region} {n:,}" for region, n in row["used"].items())
            print(
                f"{row['board']:18} {row['target']:15} {row['memory_mode']:21} {row['compile_s']:7.1f}s "
                f"{row['build_s']:6.1f}s  {regions}",
                flush=True,
            )


if __name__ == "__main__":
    main()
