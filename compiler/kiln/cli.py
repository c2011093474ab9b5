"""The `kiln` command."""

from __future__ import annotations

import argparse
import logging
import sys

from kiln import boards
from kiln.firmware import build as firmware
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


def _quiet_third_party_logs():
    """torchao warns that its CUDA-only libraries do not load, and torch's pytree about a
    deprecation inside torchao: neither concerns kiln's users."""
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _compile(args) -> int:
    from pathlib import Path

    _quiet_third_party_logs()
    from kiln import compile as kc
    from kiln.spec import CompileSpec, Exclusions

    spec = CompileSpec(
        target=args.target, system_config=args.system_config, memory_mode=args.memory_mode,
        quantize=not args.no_quantize, delegate=not args.no_delegate, io=args.io,
        activation_bits=args.activation_bits,
        exclusions=Exclusions(tuple(args.exclude_op), tuple(args.exclude_module), tuple(args.exclude_node)),
        intermediates=Path(args.intermediates) if args.intermediates else None,
    )
    result = kc.compile_model(args.model, spec, Path(args.calibration) if args.calibration else None,
                              log=lambda line: print(line, file=sys.stderr))
    report_path = kc.write(result, Path(args.output))
    print(kc.format_report(result.report))
    print(f"wrote {args.output} and {report_path}")
    return 0


def _run_host(args) -> int:
    _quiet_third_party_logs()
    from kiln.reference import run_host as host

    for path in host.run_files(args.pte, args.input, args.output_dir):
        print(path)
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
    co = sub.add_parser("compile", help="compile a model (zoo name or .py file) to a .pte")
    co.add_argument("model", help="a zoo model name or a .py file defining ModelUnderTest and ModelInputs")
    co.add_argument("--target", required=True, help="e.g. ethos-u55-128 (see `kiln targets`)")
    co.add_argument("--output", required=True, help="the .pte to write; the report goes beside it as .json")
    co.add_argument("--system-config", default=None, help="Vela system config (default: the board's)")
    co.add_argument("--memory-mode", default=None, help="Vela memory mode (default: the board's)")
    co.add_argument("--calibration", default=None, help="an .npz (or folder of them) of representative inputs")
    co.add_argument("--no-quantize", action="store_true", help="keep the model in float (it then runs on the CPU)")
    co.add_argument("--no-delegate", action="store_true", help="run everything on the CPU")
    co.add_argument("--io", choices=("float", "int8"), default="float", help="the program's input/output type")
    co.add_argument("--activation-bits", type=int, choices=(8, 16), default=8)
    co.add_argument("--exclude-op", action="append", default=[], metavar="OP", help="keep an op type off the NPU")
    co.add_argument("--exclude-module", action="append", default=[], metavar="PATH",
                    help="keep a module (and its submodules) off the NPU")
    co.add_argument("--exclude-node", action="append", default=[], metavar="NAME", help="keep a node off the NPU")
    co.add_argument("--intermediates", default=None, metavar="DIR", help="keep TOSA and Vela outputs here")
    co.set_defaults(func=_compile)
    rh = sub.add_parser("run-host", help="run a .pte on the host (the reference the firmware must match)")
    rh.add_argument("pte")
    rh.add_argument("--input", action="append", default=[], help="raw little-endian input bytes, in input order")
    rh.add_argument("--output-dir", required=True)
    rh.set_defaults(func=_run_host)
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
