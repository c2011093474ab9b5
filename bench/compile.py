"""Compile-time and NPU-placement benchmark of `kiln compile` against ExecuTorch 1.5.1.

Run: .venv/bin/python bench/compile.py [--target ethos-u55-128]
Prints, per MLPerf Tiny model: kiln's compile time (imports and one warm-up compile of
another model excluded, so lazy imports inside torch do not count), the share of MACs on
the NPU, what stays on the CPU besides the float<->int8 edges, and Vela's NPU cycle
estimate, beside ExecuTorch 1.5.1's figures measured on this machine kind
(../shared/notes/peers.md).
"""

from __future__ import annotations

import argparse
import time

from kiln import compile as kc
from kiln.spec import CompileSpec

# ExecuTorch 1.5.1, ethos-u55-128 / Shared_Sram: (AOT seconds, Vela NPU cycles, left on CPU)
EXECUTORCH = {
    "tiny_cnn": (2.4, 1961, "-"),
    "ds_cnn": (5.1, 87341, "avg_pool2d"),
    "resnet8": (6.9, 192325, "avg_pool2d"),
    "mobilenet_v1_025": (12.1, 218057, "-"),
    "fc_autoencoder": (6.1, 41404, "-"),
}
EDGES = {"quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ethos-u55-128")
    args = parser.parse_args()
    quiet = lambda line: None  # noqa: E731
    kc.compile_model("digits", CompileSpec(args.target), log=quiet)  # warm-up, not measured
    print(f"kiln compile, {args.target} (board default system config and memory mode)")
    header = (f"{'model':18} {'kiln s':>7} {'ET s':>6} {'kiln/ET':>8} {'NPU MACs':>9} {'CPU ops':>12} "
              f"{'kiln cycles':>12} {'ET cycles':>10} {'cycles ratio':>12}")
    print(header)
    print("-" * len(header))
    for name, (et_seconds, et_cycles, et_cpu) in EXECUTORCH.items():
        start = time.perf_counter()
        result = kc.compile_model(name, CompileSpec(args.target), log=quiet)
        seconds = time.perf_counter() - start
        report = result.report
        cpu = sorted({o["op"].split(".")[-1] for o in report["ops"] if o["where"] == "cpu" and o["op"] not in EDGES})
        print(f"{name:18} {seconds:7.2f} {et_seconds:6.1f} {seconds / et_seconds:8.2f} "
              f"{100 * report['macs']['npu_share']:8.1f}% {', '.join(cpu) or '-':>12} "
              f"{report['npu_cycles']:12,} {et_cycles:10,} {report['npu_cycles'] / et_cycles:12.3f}")
    print("ET: ExecuTorch 1.5.1's Arm flow on this machine kind; its CPU ops for ds_cnn and resnet8:"
          " the final avg_pool2d.")


if __name__ == "__main__":
    main()
