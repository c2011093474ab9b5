"""kiln's integer CPU kernels against CMSIS-NN's and against kiln's own float path, in instructions
counted on kiln's virtual platform (QEMU and kiln's instruction-count plugin).

Per kernel shape and code path: the instructions the kernel executed, its int8 MACs per
instruction, CMSIS-NN's figure for the same shape and path (arm-none-eabi-gcc 12.2 -O2
-mcpu=cortex-m55 on QEMU mps3-an547, the kernel's instructions alone; clang 19's where known), and
kiln's float path for the same op (--no-integer-kernels: the portable float kernel between a
dequantize and a quantize). Per zoo model and path: instructions per inference on each path and
the float path's, and the image's RAM.

How a kernel is counted: the shape is a one-op PyTorch module compiled with --io int8 for the CPU
target (so the program holds the op's calls and nothing else), built into kiln's executor runner
and run once on the virtual platform counting each call of Method::run_instruction (one per
program instruction: kiln.reference.profile.RUN_INSTRUCTION, as `kiln profile --cpu-instructions`
does). A kernel's figure is the sum of the calls the op owns: the integer kernel's one call, or
the float path's dequantize, float kernel and quantize; each call's count includes the executor's
dispatch of it (looking up its arguments: tens of instructions).

The paths: helium, the integer kernels built for cortex-m55 (corstone-300, run on QEMU
mps3-an547); dsp, for cortex-m4 (mps2-an386: SMLAD, no Helium); plain, for cortex-m55 built with
the firmware's KILN_KERNELS_PLAIN (their plain C, no Helium or DSP code of kiln's own; the
compiler may still choose DSP instructions), as CMSIS-NN's plain C column was measured on that
core. A model's instructions per inference are those of Method::execute() (kiln run
--count-instructions), its float input's quantize and its output's dequantize included; RAM is
the image's initialised and zeroed data (the planned buffers and the runtime's tables; not the
board's 32 KiB stack).

    .venv/bin/python bench/cpu_kernels.py [--shapes conv1x1,...] [--models ds_cnn,...] [--paths helium,dsp,plain]
        [--work DIR]  (keep the builds there: a second run rebuilds only what changed)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from kiln import compile as kiln_compile
from kiln import flow
from kiln.frontend.export import LoadedModel
from kiln.reference import profile as host_profile
from kiln.simulator import qemu_plugin
from kiln.spec import CompileSpec

PATHS = {  # path: (target, the firmware's extra CMake options)
    "helium": ("cortex-m55", ("-DKILN_KERNELS_PLAIN=OFF",)),
    "dsp": ("cortex-m4", ("-DKILN_KERNELS_PLAIN=OFF",)),
    "plain": ("cortex-m55", ("-DKILN_KERNELS_PLAIN=ON",)),
}
MODELS = ("ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder")


@dataclass(frozen=True)
class Shape:
    module: object  # () -> torch.nn.Module
    input: tuple[int, ...]
    macs: int | None  # int8 multiply-accumulates (None: not a MAC kernel)
    cmsis: dict[str, int]  # path -> CMSIS-NN's instructions (gcc 12.2)
    cmsis_clang: int | None = None  # CMSIS-NN's MVE instructions built with clang 19


def _conv(cin, cout, k, groups=1):
    return lambda: torch.nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups)


SHAPES = {
    "conv1x1 1x16x16x32->32": Shape(
        _conv(32, 32, 1), (1, 32, 16, 16), 262_144, {"helium": 162_536, "dsp": 702_222, "plain": 894_570}, 151_575
    ),
    "conv3x3 1x16x16x16->32": Shape(
        _conv(16, 32, 3), (1, 16, 16, 16), 1_179_648, {"helium": 394_458, "dsp": 2_426_458, "plain": 3_292_377}, 387_975
    ),
    "depthwise3x3 1x16x16x32": Shape(
        _conv(32, 32, 3, groups=32), (1, 32, 16, 16), 73_728, {"helium": 202_274, "dsp": 566_744, "plain": 696_246}
    ),
    "linear 256->64": Shape(
        lambda: torch.nn.Linear(256, 64), (1, 256), 16_384, {"helium": 8_623, "dsp": 34_007, "plain": 52_190}, 3_395
    ),
    "softmax 1x1000": Shape(
        lambda: torch.nn.Softmax(dim=-1), (1, 1000), None, {"helium": 546_004, "dsp": 511_828, "plain": 511_828}, 74_230
    ),
    "avgpool global 1x8x8x64": Shape(
        lambda: torch.nn.AdaptiveAvgPool2d(1),
        (1, 64, 8, 8),
        None,
        {"helium": 6_795, "dsp": 22_612, "plain": 60_429},
        4_732,
    ),
}


def build_and_count(result, path: str, work: Path, request: qemu_plugin.Request):
    """Builds kiln's runner for `result` with `path`'s target and options in work/<path> (one
    folder per path: each build after the first is incremental) and runs it once on the virtual
    platform counting `request`; returns (run, memory report)."""
    target, options = PATHS[path]
    folder = work / path
    folder.mkdir(parents=True, exist_ok=True)
    pte = folder / "program.pte"
    kiln_compile.write(result, pte)
    elf = flow.build_runner(pte, target, output=folder / "runner", echo=lambda *a, **k: None, cmake_options=options)
    run = flow.run(flow.firmware(elf, target), "virtual", 1800, request, note=lambda line: None)
    if run.status != 0 or run.instructions is None:
        raise SystemExit(f"the runner exited {run.status} on {path}: {' | '.join(run.uart[-3:])}")
    return run, json.loads((folder / "runner" / "memory_report.json").read_text())


def kernel_instructions(shape: Shape, path: str, integer: bool, work: Path) -> int:
    """The instructions of the calls the shape's op owns in its one-op program (see the docstring)."""
    torch.manual_seed(0)
    loaded = LoadedModel("op", shape.module().eval(), (torch.randn(*shape.input),))
    target = PATHS[path][0]
    result = kiln_compile.compile_model(
        loaded, CompileSpec(target, io="int8", integer_kernels=integer), log=lambda line: None
    )
    owners = host_profile.instruction_owners(result)
    run, _ = build_and_count(result, path, work, qemu_plugin.Request(host_profile.RUN_INSTRUCTION))
    calls = run.instructions.calls[: len(owners)]
    ops = {what for kind, what in owners if kind == "cpu"}
    if len(ops) != 1:
        raise SystemExit(f"{loaded.name} compiled to the calls of {sorted(ops)}, not of one op")
    return sum(calls)


def model_figures(model: str, path: str, integer: bool, work: Path) -> tuple[int, int]:
    """(instructions per inference, RAM bytes) of a zoo model on `path`."""
    target = PATHS[path][0]
    result = kiln_compile.compile_model(model, CompileSpec(target, integer_kernels=integer), log=lambda line: None)
    run, report = build_and_count(result, path, work, qemu_plugin.Request(flow.INFERENCE_CALL))
    ram = sum(p["data"] + p["bss"] for p in report["parts"].values())
    return run.instructions.calls[0], ram


def _n(v) -> str:
    return "-" if v is None else f"{v:,}"


def kernels_table(shapes: list[str], paths: list[str], work: Path) -> None:
    print("kernel instructions (one call; float = dequantize + float kernel + quantize):")
    print(
        f"{'shape':26} {'path':6} {'kiln':>10} {'MAC/instr':>9} {'CMSIS-NN':>10} {'clang-19':>9} "
        f"{'kiln/CMSIS':>10} {'float':>11} {'float/kiln':>10}"
    )
    floats: dict[str, int] = {}
    for name in shapes:
        shape = SHAPES[name]
        for path in paths:
            kiln = kernel_instructions(shape, path, True, work)
            target = PATHS[path][0]
            if target not in floats:  # the float kernels have one path per core
                floats[target] = kernel_instructions(shape, path, False, work)
            cmsis, clang = shape.cmsis[path], shape.cmsis_clang if path == "helium" else None
            per = f"{shape.macs / kiln:.2f}" if shape.macs else "-"
            print(
                f"{name:26} {path:6} {kiln:>10,} {per:>9} {cmsis:>10,} {_n(clang):>9} {kiln / cmsis:>10.2f} "
                f"{floats[target]:>11,} {floats[target] / kiln:>10.1f}",
                flush=True,
            )
        floats.clear()


def models_table(models: list[str], paths: list[str], work: Path) -> None:
    print("\nper inference (instructions in Method::execute) and RAM (bytes of data + bss):")
    print(f"{'model':18} {'path':6} {'integer':>12} {'float':>12} {'float/int':>9} {'RAM int':>9} {'RAM float':>9}")
    for model in models:
        floats: dict[str, tuple[int, int]] = {}
        for path in paths:
            instructions, ram = model_figures(model, path, True, work)
            target = PATHS[path][0]
            if target not in floats:
                floats[target] = model_figures(model, path, False, work)
            f_instructions, f_ram = floats[target]
            print(
                f"{model:18} {path:6} {instructions:>12,} {f_instructions:>12,} {f_instructions / instructions:>9.1f} "
                f"{ram:>9,} {f_ram:>9,}",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="comma-separated prefixes of the shapes' names (default: all)")
    parser.add_argument("--models", default=",".join(MODELS), help="zoo models ('' for none)")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--work", type=Path, help="keep the builds in this folder (default: a temporary one)")
    args = parser.parse_args()
    prefixes = [p for p in (args.shapes.split(",") if args.shapes is not None else [""])]
    shapes = [name for name in SHAPES if any(name.startswith(p) for p in prefixes)]
    paths = [p for p in args.paths.split(",") if p]
    with tempfile.TemporaryDirectory(prefix="kiln-cpu-kernels-") as tmp:
        work = args.work or Path(tmp)
        if shapes:
            kernels_table(shapes, paths, work)
        models = [m for m in args.models.split(",") if m]
        if models:
            models_table(models, paths, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
