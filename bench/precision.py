"""What 16-bit activations buy: a transformer compiled at 8 bits, mixed (--int16 attention,norms), auto
(--int16 auto) and 16 bits, run with `kiln run-host`, against the float model.

Run: .venv/bin/python bench/precision.py [--models vit_tiny,kwt] [--target ethos-u85-256]
     [--calibration 16] [--samples 16] [--policies attention,norms]

Each model is calibrated on --calibration random inputs (normal, the example input's mean and
spread) and evaluated on --samples others. Per precision and output it prints, against the float
model: the largest absolute error, that error in steps of the 8-bit program's output (so rows
compare), the Pearson correlation over every element, how often the top class agrees, and the
NPU share of ops; and against the PT2E reference of the same quantization, the worst steps off
(kiln's own error, which the tests bound).

Measured 2026-11-27 (ethos-u85-256, --calibration 8 --samples 8, 2-core machine), the transformer
zoo against the float model: the largest error in steps of the int8 program's output / the
Pearson correlation, per precision (mixed: --int16 attention,norms). 16 bits brings every model
within 1.3-8.7 int8 steps of float (correlation >= 0.9998); mixed helps 6 of 9 outputs and hurts
deit_tiny, bert_tiny's hidden states and llama_block here (8 samples; a 16-bit region's output
requantized to 8 bits keeps the 8-bit step).
    deit_tiny out 0        int8  18.6 / 0.9969  mixed  19.6 / 0.9949  int16   2.2 / 0.9999
    mobilevit out 0        int8   7.5 / 0.9997  mixed   4.8 / 0.9998  int16   2.2 / 1.0000
    kwt_sdpa out 0         int8  35.1 / 0.9806  mixed  25.1 / 0.9861  int16   1.9 / 0.9999
    conformer out 0        int8  22.8 / 0.9954  mixed  14.5 / 0.9969  int16   4.7 / 0.9998
    bert_tiny out 0        int8   5.1 / 0.9991  mixed  25.9 / 0.9995  int16   8.7 / 0.9999
    bert_tiny out 1        int8  13.9 / 0.9985  mixed   5.0 / 0.9997  int16   2.8 / 0.9999
    whisper_encoder out 0  int8  25.4 / 0.9981  mixed  12.2 / 0.9988  int16   2.0 / 0.9999
    gpt2_block out 0       int8   8.0 / 0.9990  mixed   5.1 / 0.9994  int16   1.3 / 1.0000
    llama_block out 0      int8   7.9 / 0.9986  mixed  11.0 / 0.9984  int16   1.8 / 0.9999
Measured 2026-11-28 (ethos-u85-256, --models llama_block,gpt2_block --calibration 8 --samples 8): the
largest error in int8 steps / correlation / Vela NPU cycles, auto at its default 30 dB.
    llama_block  int8 7.89 / 0.99860 / 82,413   mixed 11.02 / 0.99844 / 121,489
                 auto 5.13 / 0.99950 / 119,345 (66 ops; calibration SQNR 25.5 -> 30.1 dB)
                 int16 1.81 / 0.99993 / 113,615
    gpt2_block   int8 7.99 / 0.99902 / 53,252    mixed 5.09 / 0.99943 / 72,567
                 auto 4.67 / 0.99951 / 66,733 (28 ops; 27.0 -> 30.1 dB)
                 int16 1.27 / 0.99996 / 74,115
auto beats mixed on both at fewer 16-bit ops; on llama_block its requantizations between widths
cost more NPU cycles than all of it at 16 bits.
Against PT2E in float64 (tests.compiler.helpers.Float64Arithmetic), all 15 zoo models on
ethos-u85-256: int8 within 1 step (14 exact); int16 within 3-23 16-bit steps (10-75 % within one:
the interpolated 16-bit tables); mixed up to 502 16-bit steps (0.12) at a 16-bit output (bert_tiny,
whisper_encoder; conformer 11 8-bit steps): not traced yet.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from kiln import compile as kc
from kiln import models
from kiln.reference import run_host
from kiln.spec import AutoRule, CompileSpec, Int16Regions

EDGES = {"quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor"}


def draws(example: tuple[torch.Tensor, ...], count: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    """`count` random inputs shaped and spread like `example`'s float ones; its integer and bool
    inputs (token ids, masks) as they are."""
    g = torch.Generator().manual_seed(seed)

    def draw(x: torch.Tensor) -> torch.Tensor:
        return torch.randn(x.shape, generator=g) * x.std() + x.mean() if x.is_floating_point() else x

    return [tuple(draw(x) for x in example) for _ in range(count)]


def specs(target: str, policies: tuple[str, ...]) -> dict[str, CompileSpec]:
    return {
        "int8": CompileSpec(target),
        "mixed": CompileSpec(target, int16=Int16Regions(policies=policies)),
        "auto": CompileSpec(target, int16=Int16Regions(auto=AutoRule())),
        "int16": CompileSpec(target, activation_bits=16),
    }


def measure(name: str, target: str, calibration: int, samples: int, policies: tuple[str, ...]) -> list[str]:
    module, example = models.load(name)
    module.eval()
    calibrate, evaluate = draws(example, calibration, 1), draws(example, samples, 2)
    with torch.no_grad():
        floats = [module(*x) for x in evaluate]
    floats = [[f] if isinstance(f, torch.Tensor) else list(f) for f in floats]
    lines, int8_step = [], None
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "calibration.npz"
        np.savez(npz, *[np.stack([x[i].numpy() for x in calibrate]) for i in range(len(example))])
        for precision, spec in specs(target, policies).items():
            result = kc.compile_model(name, spec, npz, log=lambda line: None)
            ops = [o for o in result.report["ops"] if o["op"] not in EDGES]
            on_npu = sum(o["where"] == "npu" for o in ops)
            got = [run_host.run(result.pte, [t.numpy() for t in x]) for x in evaluate]
            with torch.no_grad():
                pt2e = [result.quantized_module(*x) for x in evaluate]
            pt2e = [[p] if isinstance(p, torch.Tensor) else list(p) for p in pt2e]
            for o, value in enumerate(result.graph.outputs):
                want = np.stack([f[o].numpy() for f in floats]).astype(np.float64)
                have = np.stack([g[o] for g in got]).astype(np.float64)
                ref = np.stack([p[o].numpy() for p in pt2e]).astype(np.float64)
                step = float(value.producer.inputs[0].qparams.scale)
                int8_step = step if precision == "int8" else int8_step
                error = np.abs(have - want)
                corr = float(np.corrcoef(have.ravel(), want.ravel())[0, 1])
                top = float(np.mean(have.reshape(samples, -1).argmax(1) == want.reshape(samples, -1).argmax(1)))
                lines.append(
                    f"{name:10} {precision:6} out {o}: max |err| {error.max():.5f} = "
                    f"{error.max() / int8_step:6.2f} int8 steps, corr {corr:.6f}, top-1 agrees {top:.3f}, "
                    f"vs PT2E {np.rint(np.abs(have - ref) / step).max():.0f} steps; "
                    f"NPU {on_npu}/{len(ops)} ops in {len(result.report['delegates'])} delegate(s), "
                    f"{len(result.report['int16'])} 16-bit values{_auto(result.report)}; "
                    f"Vela {result.report['npu_cycles']:,} NPU cycles"
                )
    return lines


def _auto(report: dict) -> str:
    """--int16 auto's choice, where it ran: how many ops, and the output SQNR it measured."""
    auto = report.get("int16_auto")
    if auto is None:
        return ""
    ops = {op for c in auto["promoted"] for op in c["ops"]}
    return f" (auto: {len(ops)} ops, calibration SQNR {auto['int8_sqnr_db']:.1f} -> {auto['pt2e_sqnr_db']:.1f} dB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vit_tiny,kwt")
    parser.add_argument("--target", default="ethos-u85-256")
    parser.add_argument("--calibration", type=int, default=16)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--policies", default="attention,norms")
    args = parser.parse_args(argv)
    for name in args.models.split(","):
        for line in measure(name, args.target, args.calibration, args.samples, tuple(args.policies.split(","))):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
