"""``python -m kiln.boards``: generate a board's build files, or check descriptions. CMake runs
it early in a configure (cmake/kiln_board.cmake), so only the standard library is used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kiln.boards.catalogue import BOARDS_DIR, board_names, load, targets
from kiln.boards.generators import generate
from kiln.boards.loader import load_board
from kiln.errors import run_command

DESCRIPTION = "Write a board's build files (linker script, C header, CMake fragment), or check board descriptions."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.boards", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write board.ld, kiln_board.h and board.cmake")
    gen.add_argument("--board", required=True)
    gen.add_argument("--out", required=True, type=Path)
    gen.add_argument("--stack-size", type=lambda s: int(s, 0), help="main stack in bytes (default: the board's)")
    check = sub.add_parser("check", help="validate board descriptions")
    check.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)

    def command() -> int:
        if args.command == "generate":
            generate(load(args.board), args.out, args.stack_size)
            return 0
        for path in args.files or [BOARDS_DIR / n / "board.toml" for n in board_names()]:
            board = load_board(path)
            print(f"{path}: ok ({board.name}, {len(board.memory)} regions)")
        targets()
        return 0

    return run_command("kiln", command)
