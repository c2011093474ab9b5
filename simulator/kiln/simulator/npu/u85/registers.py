"""Typed views of the Ethos-U85's command-stream registers.

Field layouts are Vela 5.2.0's ethos_u85_interface.hpp (bit positions below count inside
a command's 16-bit parameter, i.e. header bit - 16). Where a field sits where it does on
the Ethos-U55/U65 (feature-map precision, type and format; kernel, stride, dilation;
padding; upscale; OFM scale_mode) the shared Registers views read it. What differs:

  OFM_PRECISION  type [0], precision [2:1], format [7:6], scale_mode [8],
                 reverse [10:9] (NONE, H, W, C), transpose [13:11] (HWC, WHC, HCW, WCH,
                 -, -, CHW, CWH), storage [15:14] (TILE2X2, TILE3X1, CHAINED, NONE)
  IFM(2)_PRECISION  type [0], precision [3:2] (8, 16, 32, 64 bits), format [7:6],
                 storage [15:14]
  OFM_SCALE      shift [5:0], dbl_rnd [10:6], round_mode [15:13] (round_mode_ofm);
                 payload: scale [30:0]
  IFM(2)_SCALE   shift [5:0], dbl_rnd [10:6], round_mode [13] (round_mode_ifm);
                 payload: scale [30:0]
  ACC_FORMAT     acc_format [1:0] (I32, I48), acc_input [5:4] (RESET, KEEP, IFM2),
                 acc_output [6] (ENABLE, DISABLE), microblock [10:8]
                 (1x1, 1x2, 1x4, 2x2, 2x4, 4x4; height x width)
  ACTIVATION     function [4:0], table [7:5], clip_range [12] (B16, NONE)
  IFM(2)_BROADCAST  mode [3:0]: bit 0 H, bit 1 W, bit 2 C, 8 = SCALAR (OP_SCALAR)
  WEIGHT_FORMAT  format [0] (SWD, FWD), sparsity [4] (NONE, SPARSE_2_4)
  addresses      40 bits: the parameter's low byte is bits 39..32
"""

from __future__ import annotations

import numpy as np

from kiln.errors import NotModelled, RegisterError
from kiln.simulator.npu.registers import (
    FORMAT_NHCWB16,
    ROUND_FLOOR,
    ROUND_NATURAL,
    ROUND_TFL,
    ROUND_TRUNCATE,
    Registers,
    signed16,
    view,
)

_SIZE_BITS = {0: 8, 1: 16, 2: 32, 3: 64}
_DTYPES = {
    (8, False): np.uint8,
    (8, True): np.int8,
    (16, False): np.uint16,
    (16, True): np.int16,
    (32, True): np.int32,
    (32, False): np.uint32,
    (64, True): np.int64,
    (64, False): np.uint64,
}

STORAGE_TILE2X2, STORAGE_TILE3X1, STORAGE_CHAINED, STORAGE_NONE = 0, 1, 2, 3
STORAGE_NAMES = {
    STORAGE_TILE2X2: "TILE2X2",
    STORAGE_TILE3X1: "TILE3X1",
    STORAGE_CHAINED: "CHAINED",
    STORAGE_NONE: "NONE",
}

ACC_I32, ACC_I48 = 0, 1
ACC_INPUT_RESET, ACC_INPUT_KEEP, ACC_INPUT_IFM2 = 0, 1, 2
ACC_INPUT_NAMES = {ACC_INPUT_RESET: "RESET", ACC_INPUT_KEEP: "KEEP", ACC_INPUT_IFM2: "IFM2"}
MICROBLOCKS = {0: (1, 1), 1: (1, 2), 2: (1, 4), 3: (2, 2), 4: (2, 4), 5: (4, 4)}  # (height, width)

# round_mode_ofm / round_mode_ifm -> the rounding of kiln.simulator.npu.arithmetic.rescale.
# DOUBLE_SYMMETRIC is TOSA's double rounding (apply_scale_32 with double_round), the U55's TFL.
OFM_ROUNDING = {0: ROUND_TFL, 1: ROUND_NATURAL, 4: ROUND_TRUNCATE, 5: ROUND_FLOOR}
OFM_ROUNDING_NAMES = {
    0: "DOUBLE_SYMMETRIC",
    1: "NATURAL",
    2: "DOUBLE_ASYMMETRIC",
    3: "SYMMETRIC",
    4: "TRUNCATE_TO_ZERO",
    5: "TRUNCATE_TO_LOWER",
}
IFM_ROUNDING = {0: ROUND_TFL, 1: ROUND_NATURAL}
IFM_ROUNDING_NAMES = {0: "DOUBLE_SYMMETRIC", 1: "NATURAL"}

BROADCAST_SCALAR = 8
BROADCAST_NAMES = {0: "NONE", 1: "H", 2: "W", 3: "HW", 4: "C", 5: "CH", 6: "CW", 7: "CWH", 8: "SCALAR"}

TRANSPOSES = {0: (0, 1, 2), 1: (1, 0, 2), 2: (0, 2, 1), 3: (1, 2, 0), 6: (2, 0, 1), 7: (2, 1, 0)}
TRANSPOSE_NAMES = {0: "HWC", 1: "WHC", 2: "HCW", 3: "WCH", 6: "CHW", 7: "CWH"}
REVERSE_AXES = {0: None, 1: 0, 2: 1, 3: 2}
REVERSE_NAMES = {0: "NONE", 1: "H", 2: "W", 3: "C"}


class U85Registers(Registers):
    """The register file of an Ethos-U85 command stream (kiln.simulator.npu.registers'
    Registers with the U85's field layouts)."""

    def address(self, name: str) -> int:
        return self.payloads.get(name, 0) | ((self.values.get(name, 0) & 0xFF) << 32)

    @view
    def ifm_dtype(self, prefix: str) -> tuple[np.dtype, int]:
        return _precision(f"{prefix}_PRECISION", self.param(f"{prefix}_PRECISION"), 2)

    @view
    def ofm_dtype(self) -> tuple[np.dtype, int]:
        return _precision("OFM_PRECISION", self.param("OFM_PRECISION") & 0xFF, 1)

    @view
    def storage(self, prefix: str) -> int:
        return (self.param(f"{prefix}_PRECISION") >> 14) & 3

    @view
    def rounding(self) -> int:
        """The rescale rounding of OFM_SCALE's round_mode (refuses what is not modelled)."""
        value = self.param("OFM_SCALE")
        mode = (value >> 13) & 7
        if mode not in OFM_ROUNDING_NAMES:
            raise RegisterError(f"OFM_SCALE: reserved rounding mode {mode}")
        if mode not in OFM_ROUNDING:
            raise NotModelled(f"OFM_SCALE: rounding mode {OFM_ROUNDING_NAMES[mode]} is not modelled")
        if (value >> 6) & 0x1F:
            raise NotModelled(f"OFM_SCALE: double-round shift {(value >> 6) & 0x1F} is not modelled")
        return OFM_ROUNDING[mode]

    def rounding_name(self) -> str:
        return OFM_ROUNDING_NAMES.get((self.param("OFM_SCALE") >> 13) & 7, "reserved")

    @view
    def ofm_scale(self) -> tuple[int, int]:
        return self.payload("OFM_SCALE") & 0x7FFF_FFFF, self.param("OFM_SCALE") & 0x3F

    @view
    def input_scale(self, prefix: str) -> tuple[int, int, int]:
        """(multiplier, shift, rounding) of IFM_SCALE or IFM2_SCALE."""
        value = self.param(f"{prefix}_SCALE")
        if (value >> 6) & 0x1F:
            raise NotModelled(f"{prefix}_SCALE: double-round shift {(value >> 6) & 0x1F} is not modelled")
        return self.payload(f"{prefix}_SCALE") & 0x7FFF_FFFF, value & 0x3F, IFM_ROUNDING[(value >> 13) & 1]

    @view
    def acc_format(self) -> tuple[int, int, bool, tuple[int, int]]:
        """(accumulator format, accumulator input, output enabled, microblock (h, w))."""
        value = self.param("ACC_FORMAT")
        acc, source, block = value & 3, (value >> 4) & 3, (value >> 8) & 7
        if acc not in (ACC_I32, ACC_I48):
            raise RegisterError(f"ACC_FORMAT: reserved accumulator format {acc}")
        if source not in ACC_INPUT_NAMES:
            raise RegisterError(f"ACC_FORMAT: reserved accumulator input {source}")
        if block not in MICROBLOCKS:
            raise RegisterError(f"ACC_FORMAT: reserved microblock {block}")
        return acc, source, not (value >> 6) & 1, MICROBLOCKS[block]

    @view
    def activation(self) -> tuple[int, int, int, int]:
        """(function, table, clip enabled, min, max); min and max as the OFM's type reads them."""
        value = self.param("ACTIVATION")
        signed = bool(self.param("OFM_PRECISION") & 1)
        lo, hi = self.param("ACTIVATION_MIN"), self.param("ACTIVATION_MAX")
        if signed:
            lo, hi = signed16(lo), signed16(hi)
        return value & 0x1F, (value >> 5) & 7, not (value >> 12) & 1, lo, hi

    @view
    def broadcast(self, prefix: str) -> int:
        mode = self.param(f"{prefix}_BROADCAST") & 0xF
        if mode > BROADCAST_SCALAR:
            raise RegisterError(f"{prefix}_BROADCAST: reserved broadcast mode {mode}")
        return mode

    @view
    def transpose(self) -> tuple[int, int]:
        """(transpose, reverse) of OFM_PRECISION."""
        value = self.param("OFM_PRECISION")
        transpose, reverse = (value >> 11) & 7, (value >> 9) & 3
        if transpose not in TRANSPOSES:
            raise RegisterError(f"OFM_PRECISION: reserved transpose {transpose}")
        return transpose, reverse

    @view
    def weight_format(self) -> tuple[int, int]:
        """(format: 0 SWD, 1 FWD; sparsity: 0 none, 1 2:4)."""
        value = self.param("WEIGHT_FORMAT")
        return value & 1, (value >> 4) & 1


def _precision(name: str, value: int, size_shift: int) -> tuple[np.dtype, int]:
    signed = bool(value & 1)
    size = (value >> size_shift) & 3
    layout = (value >> 6) & 3
    if layout > FORMAT_NHCWB16:
        raise RegisterError(f"{name} 0x{value:04x}: reserved format {layout}")
    return np.dtype(_DTYPES[(_SIZE_BITS[size], signed)]), layout
