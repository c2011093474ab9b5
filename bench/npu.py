"""Benchmarks kiln's NPU model on the zoo: per model and target, the wall time of one
inference on the model and its cycle estimate against Vela's (VelaResult.npu_cycles).

    .venv/bin/python bench/npu.py [--target ethos-u55-128,ethos-u85-256] [--models a,b] [--repeat 3]
        [--system-config NAME] [--memory-mode MODE]

Each delegate runs on random int8 inputs; the model's outputs are checked bit for bit
against tosa_reference_model once (the "exact" column). The system config and memory
mode (default: the board's) go to both Vela and the cycle estimate. Several targets
(comma-separated; the default puts the Ethos-U85 model beside the U55's) print one table
each. The U85's cycle column is kiln.simulator.npu.u85.cycles' evaluation of Vela's U85
performance model."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests.simulator

from kiln.compile import compile_model  # noqa: E402
from kiln.simulator.npu.config import config_for  # noqa: E402
from kiln.simulator.npu.standalone import run_compiled  # noqa: E402
from kiln.spec import CompileSpec  # noqa: E402
from tests.simulator import helpers  # noqa: E402

ZOO = [
    "tiny_cnn",
    "ds_cnn",
    "resnet8",
    "mobilenet_v1_025",
    "fc_autoencoder",
    "mobilenet_v2_035",
    "digits",
    "mobilenet_v2",
]


def bench(
    model: str, target: str, repeat: int, system_config: str | None = None, memory_mode: str | None = None
) -> dict:
    result = compile_model(model, CompileSpec(target=target, system_config=system_config, memory_mode=memory_mode))
    config = config_for(target, system_config, memory_mode)
    rng = np.random.default_rng(0)
    wall, cycles, vela_cycles, exact = 0.0, 0, 0, True
    for part, tosa, vela in zip(result.partitioning.partitions, result.tosa, result.vela):
        inputs = [rng.integers(-128, 128, size=tuple(v.shape), dtype=np.int8) for v in part.inputs]
        diffs, first = helpers.compare(tosa, vela, inputs, target)
        exact = exact and not any(diffs)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            _, run = run_compiled(vela, inputs, config)
            times.append(time.perf_counter() - start)
        wall += min(times)
        cycles += run.cycles
        vela_cycles += vela.npu_cycles
    return {"model": model, "wall_s": wall, "cycles": cycles, "vela": vela_cycles, "exact": exact}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ethos-u55-128,ethos-u85-256", help="one or more, comma-separated")
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--system-config", help="Vela system config (default: the board's)")
    parser.add_argument("--memory-mode", help="Vela memory mode (default: the board's)")
    args = parser.parse_args()
    for target in args.target.split(","):
        table(target, args)
    return 0


def table(target: str, args) -> None:
    setup = ", ".join(filter(None, (target, args.system_config, args.memory_mode)))
    print(f"{'model':18} {'wall s':>8} {'cycles':>10} {'vela':>10} {'ratio':>6} exact   ({setup})")
    worst = 0.0
    for model in args.models.split(","):
        row = bench(model, target, args.repeat, args.system_config, args.memory_mode)
        ratio = row["cycles"] / row["vela"] if row["vela"] else float("nan")
        worst = max(worst, abs(ratio - 1))
        print(
            f"{model:18} {row['wall_s']:8.3f} {row['cycles']:10d} {row['vela']:10d} {ratio:6.2f} {row['exact']}",
            flush=True,
        )
    print(f"largest cycle deviation from Vela: {worst:.0%}\n")


if __name__ == "__main__":
    sys.exit(main())
