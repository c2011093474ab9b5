"""Which command-stream features the model executed: features are recorded as
(category, value) pairs with a count, so a test run can be turned into a coverage table
(kiln.simulator.npu.coverage_table)."""

from __future__ import annotations

import json
import os
from collections import Counter

# Every feature the table lists, so a gap shows as a zero: category -> values.
FEATURES: dict[str, tuple[str, ...]] = {
    "opcode": (
        "NPU_OP_STOP",
        "NPU_OP_IRQ",
        "NPU_OP_CONV",
        "NPU_OP_DEPTHWISE",
        "NPU_OP_POOL",
        "NPU_OP_ELEMENTWISE",
        "NPU_OP_DMA_START",
        "NPU_OP_DMA_WAIT",
        "NPU_OP_KERNEL_WAIT",
        "NPU_OP_PMU_MASK",
    ),
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
    "kernel": (
        "1x1",
        "up to 8x8",
        "larger than 8x8 (decomposed)",
        "stride > 1",
        "dilation 2",
        "padding",
        "part-kernel-first",
        "depth-first",
    ),
    "accumulator": ("32-bit", "40-bit"),
    "cores": ("1", "2"),
}

# Ethos-U85 runs record under these categories ("U85 " + the category its code hits).
U85 = "U85 "
FEATURES_U85: dict[str, tuple[str, ...]] = {
    U85 + c: v
    for c, v in {
        "opcode": (
            "NPU_OP_STOP",
            "NPU_OP_IRQ",
            "NPU_OP_CONV",
            "NPU_OP_DEPTHWISE",
            "NPU_OP_POOL",
            "NPU_OP_ELEMENTWISE",
            "NPU_OP_RESIZE",
            "NPU_OP_DMA_START",
            "NPU_OP_DMA_WAIT",
            "NPU_OP_KERNEL_WAIT",
            "NPU_OP_PMU_MASK",
            "NPU_OP_BRANCH",
        ),
        "elementwise": (
            "MUL",
            "ADD",
            "SUB",
            "MIN",
            "MAX",
            "LRELU",
            "ABS",
            "CLZ",
            "SHR",
            "SHL",
            "LSR",
            "DIV",
            "CMP_EQ",
            "CMP_NE",
            "CMP_GE",
            "CMP_GT",
            "AND",
            "OR",
            "XOR",
            "NOT",
            "AND_NOT",
        ),
        "pooling": ("MAX", "AVERAGE", "REDUCE_SUM", "SUM", "NONE", "MIN", "ARGMAX_X", "ARGMAX_Y"),
        "resize": ("BILINEAR", "REPLICATE", "NEAREST"),
        "activation": (
            "LUT_NONE",
            "LUT_U8_U8",
            "LUT_S8_S8",
            "LUT_S8_S16",
            "LUT_S8_S32",
            "LUT_S16_S16",
            "LUT_S16_S32",
            "LUT_TANH",
            "LUT_SIGMOID",
        ),
        "ifm_precision": ("uint8", "int8", "uint16", "int16", "int32", "IFM2 int32", "IFM2 int64"),
        "ofm_precision": ("uint8", "int8", "uint16", "int16", "int32", "int64"),
        "rounding": ("TFL", "NATURAL", "TRUNCATE", "FLOOR"),
        "ofm_scaling": ("per-channel", "global"),
        "broadcast": ("IFM H", "IFM W", "IFM C", "IFM SCALAR", "IFM2 H", "IFM2 W", "IFM2 C", "IFM2 SCALAR"),
        "chaining": ("IFM chained", "IFM2 chained"),
        "ofm_storage": ("TILE2X2", "TILE3X1", "CHAINED", "NONE"),
        "ofm_transpose": ("HWC", "WHC", "HCW", "WCH", "CHW", "CWH"),
        "ofm_reverse": ("NONE", "H", "W", "C"),
        "format": ("IFM NHWC", "IFM NHCWB16", "IFM2 NHWC", "IFM2 NHCWB16", "OFM NHWC", "OFM NHCWB16"),
        "upscale": ("none", "NEAREST", "TRANSPOSE"),
        "dma": ("1-D", "2-D", "3-D", "gather", "scatter", "to LUT RAM", "to memory"),
        "tiles": ("1 tile", "2+ tiles"),
        "kernel": (
            "1x1",
            "up to 8x8",
            "larger than 8x8 (decomposed)",
            "stride > 1",
            "dilation 2",
            "padding",
            "part-kernel-first",
            "depth-first",
        ),
        "weights": ("SWD", "SWD 2:4 sparse", "FWD", "FWD 2:4 sparse", "IFM2"),
        "accumulator": ("32-bit", "48-bit"),
        "acc_input": ("RESET", "KEEP", "IFM2"),
        "cores": ("1", "2", "4"),
    }.items()
}


class Coverage:
    """prefix: put before every category hit (U85 for an Ethos-U85 run)."""

    def __init__(self, prefix: str = ""):
        self.counts: Counter = Counter()
        self.prefix = prefix
        self._keys: dict[tuple[str, str], tuple[str, str]] = {}  # (category, value) -> its key in counts

    def hit(self, category: str, value: str) -> None:
        key = self._keys.get((category, value))
        if key is None:
            key = self._keys[(category, value)] = (self.prefix + category, value)
        self.counts[key] += 1

    def hit_all(self, hits) -> None:
        """hit() of each (category, value) of `hits`."""
        for category, value in hits:
            self.hit(category, value)

    def merge(self, other: Coverage) -> None:
        self.counts.update(other.counts)

    def as_dict(self, features: dict[str, tuple[str, ...]] | None = None) -> dict[str, dict[str, int]]:
        """category -> value -> count: every feature of `features` (default: FEATURES, or
        FEATURES_U85 for a U85 run's record), then whatever else was hit."""
        if features is None:
            features = FEATURES_U85 if self.prefix == U85 else FEATURES
        table: dict[str, dict[str, int]] = {c: {v: 0 for v in values} for c, values in features.items()}
        for (category, value), n in self.counts.items():
            table.setdefault(category, {})[value] = table.get(category, {}).get(value, 0) + n
        return table


class Uncounted(Coverage):
    """A Coverage that counts nothing: a run whose coverage nobody reads (run_stream's
    coverage=False) skips the counting."""

    def hit(self, category: str, value: str) -> None:
        pass

    def hit_all(self, hits) -> None:
        pass


# Process-wide record used by the test suite: when KILN_NPU_COVERAGE names a file, every
# run_stream adds its features there (appended as JSON lines; read by coverage_table.py).
COVERAGE_ENV = "KILN_NPU_COVERAGE"


def recording() -> bool:
    """Whether KILN_NPU_COVERAGE asks for every run's features (record_run)."""
    return bool(os.environ.get(COVERAGE_ENV))


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
