"""`kiln profile` over the zoo: per model and target, the NPU model's PMU cycles against the sum
of the per-layer figures, and each layer's cycles against Vela's per-layer estimate
(--verbose-performance): how many layers Vela gives a figure for, how many agree within 10 %,
and the worst layer.

    .venv/bin/python bench/layer_profile.py [--target ethos-u55-128,ethos-u85-256] [--models a,b]
        [--output DIR]   (also write each profile's JSON, PNGs and HTML under DIR/MODEL-TARGET)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kiln.compile import compile_model
from kiln.models import MODELS
from kiln.reference import profile
from kiln.spec import CompileSpec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="ethos-u55-128,ethos-u85-256")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    print(
        f"{'model':18} {'target':15} {'PMU cycles':>11} {'layer sum':>10} {'Vela':>10} "
        f"{'layers':>6} {'in 10%':>6}  worst layer (model / Vela)  seconds"
    )
    failures = 0
    for target in args.target.split(","):
        for model in args.models.split(","):
            start = time.perf_counter()
            p = profile.profile(compile_model(model, CompileSpec(target), log=lambda line: None))
            if args.output:
                profile.write(p, args.output / f"{model}-{target}")
            compared = [x for x in p.layers if x.agreement is not None]
            within = [x for x in compared if abs(x.agreement - 1) <= profile.TOLERANCE]
            worst = max(compared, key=lambda x: abs(x.agreement - 1), default=None)
            summed = sum(x.npu_cycles or 0 for x in p.layers)
            vela = sum(d.vela_npu_cycles for d in p.delegates)
            failures += summed != p.total_npu_cycles or len(within) != len(compared)
            said = (
                "-"
                if worst is None
                else (f"{worst.name} {worst.npu_cycles:,} / {worst.vela_npu_cycles:,} = {worst.agreement:.3f}")
            )
            print(
                f"{model:18} {target:15} {p.total_npu_cycles:>11,} {summed:>10,} {vela:>10,} {len(compared):>6} "
                f"{len(within):>6}  {said}  {time.perf_counter() - start:.1f}",
                flush=True,
            )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
