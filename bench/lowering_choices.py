"""Vela's figures behind the rows of kiln.families marked `measured`: for each row, the graphs it
was decided on, lowered both ways (the row taken and not: the target's family with the row added
and removed) and compiled with Vela for each target, NPU cycles and total cycles (the NPU's and
its waits on memory) summed over the model's delegates.

    .venv/bin/python bench/lowering_choices.py [--rows fused_exps,...] [--quick]

--quick leaves out the large models (mobilenet_v2, mobilenet_v2_035, resnet18, shufflenet_v2,
unet_tiny). The system config is the target's board default; the memory mode is the board's
unless a case names one. "first guess" says which form the target's own family takes; for a
choice row kiln.compile.fastest also compiles the other and keeps the faster."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests.compiler

from kiln import boards, families  # noqa: E402
from kiln.compile import compile_model  # noqa: E402
from kiln.frontend.export import LoadedModel  # noqa: E402
from kiln.lower import tosa as tosa_lowering  # noqa: E402
from kiln.lower import vela  # noqa: E402
from kiln.spec import CompileSpec  # noqa: E402
from tests.compiler.operator_cases import Fn  # noqa: E402

LARGE = {"mobilenet_v2", "mobilenet_v2_035", "resnet18", "shufflenet_v2", "unet_tiny"}


def _seeded(*shape) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _conv_mean_linear(h: int, w: int, c: int) -> LoadedModel:
    torch.manual_seed(0)
    module = Fn(
        lambda s, x: s.fc(torch.relu(s.conv(x)).mean((2, 3))), conv=nn.Conv2d(16, c, 3, padding=1), fc=nn.Linear(c, 10)
    )
    return LoadedModel(f"conv_mean_linear_{h}x{w}x{c}", module.eval(), (_seeded(1, 16, h, w),))


def _op(name: str, fn, *shape) -> LoadedModel:
    return LoadedModel(name, Fn(lambda s, x: fn(x)).eval(), (_seeded(*shape),))


def _conv1d() -> LoadedModel:
    torch.manual_seed(0)
    return LoadedModel("conv1d", nn.Conv1d(6, 8, 3, padding=1).eval(), (_seeded(1, 6, 16),))


U55, U55_256, U65, U65_512, U85 = "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512", "ethos-u85-256"
# row -> [(graph: a zoo or architecture name, or a factory of a LoadedModel; [(target, memory mode or None)])]
CASES = {
    families.CHANNELS_LAST_PAD_COPIES: [
        (
            lambda: _op("pad_reflect", lambda x: F.pad(x, [1, 2, 2, 1], mode="reflect"), 1, 3, 8, 8),
            [(U65, "Dedicated_Sram"), (U85, "Dedicated_Sram_384KB"), (U55, "Shared_Sram")],
        )
    ],
    families.POOLED_MEANS: [
        *[(model, [(U85, "Sram_Only")]) for model in ("tiny_cnn", "ds_cnn", "resnet8", "mobilenet_v1_025")],
        *[(model, [(U55, None)]) for model in ("ds_cnn", "resnet8")],
        ("efficientnet_b0", [(U65, None)]),
        *[(lambda h=h: _conv_mean_linear(h, h, 128), [(U65, None)]) for h in (2, 4)],
    ],
    families.FUSED_EXPS: [("kwt", [(U85, None), (U55, None), (U65, None)])],
    families.RANK4_TRANSPOSES: [
        ("unet_tiny", [(U65, None), (U65_512, None), (U55, None), (U55_256, None)]),
        *[(model, [(U85, None)]) for model in ("mobilenet_v2_035", "resnet18", "shufflenet_v2")],
        (_conv1d, [(U85, None)]),
        ("mobilenet_v2", [(U65, None)]),
    ],
    families.VELA_STRIDED_POOLS: [
        (
            lambda: _op("avg_pool_4_stride_4", lambda x: F.avg_pool2d(x, 4, stride=4), 1, 8, 16, 16),
            [(U55, None), (U85, None), (U65, None)],
        )
    ],
    families.FLAT_STRIDED_SLICES: [
        (
            lambda: _op("slice_step_2", lambda x: x[..., ::2], 1, 6, 16),
            [(U55, None), (U55_256, None), (U65, None), (U85, None)],
        )
    ],
    families.HARDWARE_RESIZE: [
        (
            lambda: _op("bilinear_2x", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), 1, 4, 6, 6),
            [(U85, "Sram_Only")],
        )
    ],
}


def both_ways(graph, row: families.Row, target_name: str, memory_mode: str | None) -> dict:
    """Vela's (NPU cycles, total cycles) of `graph` for `target_name` with `row` taken and not."""
    spec = CompileSpec(target_name, memory_mode=memory_mode)
    model = graph if isinstance(graph, str) else graph()
    result = compile_model(model, spec, log=lambda line: None)
    family = boards.target(target_name).npu
    spec = spec.resolved()
    figures = {}
    for taken in (True, False):
        variant = dataclasses.replace(family, rows=family.rows | {row.name} if taken else family.rows - {row.name})
        npu = total = 0
        for part in result.program.delegates:
            tosa = tosa_lowering.lower(part, variant)
            compiled = vela.compile_tosa(tosa, "bench", target_name, spec.system_config, spec.memory_mode)
            npu, total = npu + compiled.npu_cycles, total + compiled.total_cycles
        figures[taken] = (npu, total)
    name = graph if isinstance(graph, str) else model.name
    return {
        "graph": name,
        "target": target_name,
        "memory_mode": spec.memory_mode,
        "taken": figures[True],
        "not_taken": figures[False],
        "first_guess": "taken" if family.has(row) else "not taken",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="comma-separated row names (default: every measured row)")
    parser.add_argument("--quick", action="store_true", help="leave out the large models")
    args = parser.parse_args()
    wanted = set(args.rows.split(",")) if args.rows else {row.name for row in families.ROWS if row.measured}
    unknown = wanted - {row.name for row in families.ROWS if row.measured}
    if unknown:
        parser.error(f"no measured row {sorted(unknown)}")
    for row, cases in CASES.items():
        if row.name not in wanted:
            continue
        print(f"\n{row.name} ({row.kind.value}; {', '.join(sorted(row.families)) or 'no family'}): {row.why}")
        print(
            f"  {'graph':24} {'target':14} {'memory mode':21} {'taken: NPU / total cycles':>30} "
            f"{'not taken: NPU / total':>30}  first guess"
        )
        for graph, targets in cases:
            if args.quick and isinstance(graph, str) and graph in LARGE:
                continue
            for target_name, mode in targets:
                r = both_ways(graph, row, target_name, mode)
                taken, other = (f"{r[k][0]:,} / {r[k][1]:,}" for k in ("taken", "not_taken"))
                print(
                    f"  {r['graph']:24} {r['target']:14} {r['memory_mode']:21} {taken:>30} {other:>30}  "
                    f"{r['first_guess']}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
