"""The `kiln` command."""

from __future__ import annotations

import argparse
import sys

from kiln import boards, firmware
from kiln.errors import KilnError


def _targets(args) -> int:
    print(f"{'target':16} {'board':14} {'system config':30} memory mode")
    for name, target in boards.targets().items():
        print(f"{name:16} {target.board.name:14} {target.system_config:30} {target.memory_mode}")
    return 0


def _build_firmware(args) -> int:
    board = boards.target(args.target).board.name
    build_dir = firmware.build(board, args.build_dir, test_apps=args.test_apps, build_type=args.build_type)
    print(firmware.elf(build_dir, args.app))
    return 0


def _run_fvp(args) -> int:
    from kiln.simulator import run

    return run.main(args.rest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kiln", description="Bake PyTorch models into Cortex-M + Ethos-U firmware.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("targets", help="list the NPU targets and their boards").set_defaults(func=_targets)
    fw = sub.add_parser("build-firmware", help="build the firmware for a target's board; prints the app's ELF")
    fw.add_argument("--target", default="ethos-u55-128")
    fw.add_argument("--app", default="hello")
    fw.add_argument("--build-dir", default=None)
    fw.add_argument("--build-type", choices=("Release", "Debug"), default="Release")
    fw.add_argument("--test-apps", action="store_true", help="also build tests/fvp/apps")
    fw.set_defaults(func=_build_firmware)
    rf = sub.add_parser("run-fvp", help="run an ELF (same as ./scripts/run_fvp.sh)", add_help=False)
    rf.add_argument("rest", nargs=argparse.REMAINDER)
    rf.set_defaults(func=_run_fvp)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KilnError as error:
        print(f"kiln: error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
