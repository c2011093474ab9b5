"""Which command-stream features the model executed: features are recorded as
(category, value) pairs with a count, so a test run can be turned into a coverage table
(kiln.simulator.npu.coverage_table)."""

from __future__ import annotations

import json
import os
from collections import Counter

# Every feature the table lists, so a gap shows as a zero: category -> values.
FEATURES: dict[str, tuple[str, ...]] = {
    "opcode": ("NPU_OP_STOP", "NPU_OP_IRQ", "NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL",
               "NPU_OP_ELEMENTWISE", "NPU_OP_DMA_START", "NPU_OP_DMA_WAIT", "NPU_OP_KERNEL_WAIT",
               "NPU_OP_PMU_MASK"),
    "elementwise": ("MUL", "ADD", "SUB", "MIN", "MAX", "LRELU", "ABS", "CLZ", "SHR", "SHL"),
    "pooling": ("MAX", "AVERAGE", "REDUCE_SUM"),
    "activation": ("NONE", "TANH", "SIGMOID", "LUT8", "LUT16"),
    "ifm_precision": ("uint8", "int8", "uint16", "int16", "int32"),
    "ofm_precision": ("uint8", "int8", "uint16", "int16", "int32"),
    "rounding": ("TFL", "TRUNCATE", "NATURAL"),
    "ofm_scaling": ("per-channel", "global"),
    "ifm_scale_mode": ("16BIT", "OPA_32BIT", "OPB_32BIT"),
    "format": ("IFM NHWC", "IFM NHCWB16", "IFM2 NHWC", "IFM2 NHCWB16", "OFM NHWC", "OFM NHCWB16"),
    "ifm2": ("tensor", "scalar", "broadcast H", "broadcast W", "broadcast C", "reversed operands"),
    "upscale": ("none", "NEAREST", "TRANSPOSE"),
    "dma": ("1-D", "2-D", "3-D", "to SHRAM (LUT)", "to memory"),
    "tiles": ("1 tile", "2+ tiles"),
    "kernel": ("1x1", "up to 8x8", "larger than 8x8 (decomposed)", "stride > 1", "dilation 2",
               "padding", "part-kernel-first", "depth-first"),
    "accumulator": ("32-bit", "40-bit"),
    "cores": ("1", "2"),
}


class Coverage:
    def __init__(self):
        self.counts: Counter = Counter()

    def hit(self, category: str, value: str) -> None:
        self.counts[(category, value)] += 1

    def merge(self, other: "Coverage") -> None:
        self.counts.update(other.counts)

    def as_dict(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {c: {v: 0 for v in values} for c, values in FEATURES.items()}
        for (category, value), n in self.counts.items():
            table.setdefault(category, {})[value] = table.get(category, {}).get(value, 0) + n
        return table


# Process-wide record used by the test suite: when KILN_NPU_COVERAGE names a file, every
# run_stream adds its features there (appended as JSON lines; read by coverage_table.py).
COVERAGE_ENV = "KILN_NPU_COVERAGE"


def record_run(coverage: Coverage) -> None:
    path = os.environ.get(COVERAGE_ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps([[c, v, n] for (c, v), n in coverage.counts.items()]) + "\n")


def load(path: str) -> Coverage:
    total = Coverage()
    with open(path) as f:
        for line in f:
            if line.strip():
                for category, value, n in json.loads(line):
                    total.counts[(category, value)] += n
    return total
