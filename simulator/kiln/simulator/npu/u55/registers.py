"""The Ethos-U55/U65's register file: the fields its command stream lays out its own way
(bit positions inside a command's 16-bit parameter, the Ethos-U55/U65 command-stream
register map). The fields both families share are kiln.simulator.npu.registers'.

  IFM(2)_PRECISION  type [0], precision [3:2] (8, 16, 32 bits), format [7:6],
                    scale_mode [9:8] (16BIT, OPA_32BIT, OPB_32BIT)
  OFM_PRECISION     type [0], precision [2:1], format [7:6], scale_mode [8],
                    rounding [15:14] (TFL, TRUNCATE, NATURAL)
  OFM_SCALE         shift [5:0]; payload: scale
  ACTIVATION        function [11:0], clip_range [15:12]
  addresses         48 bits: the parameter is bits 47..32
"""

from __future__ import annotations

import numpy as np

from kiln.errors import RegisterError
from kiln.simulator.npu.registers import FORMAT_NHCWB16, ROUNDING_NAMES, Registers, signed16, view

# Element types: IFM precision field (4 bits: bit 0 signed, bits 3..2 size) and OFM
# precision field (3 bits: bit 0 signed, bits 2..1 size); size 0 = 8, 1 = 16, 2 = 32 bits.
_SIZE_BITS = {0: 8, 1: 16, 2: 32}
_DTYPES = {
    (8, False): np.uint8,
    (8, True): np.int8,
    (16, False): np.uint16,
    (16, True): np.int16,
    (32, True): np.int32,
    (32, False): np.uint32,
}

IFM_SCALE_16BIT, IFM_SCALE_OPA_32BIT, IFM_SCALE_OPB_32BIT = 0, 1, 2


class U55Registers(Registers):
    """The register file of an Ethos-U55/U65 command stream."""

    def address(self, name: str) -> int:
        """A cmd1 address register: payload is bits 31..0, the parameter bits 47..32."""
        return self.payloads.get(name, 0) | (self.values.get(name, 0) << 32)

    @view
    def ifm_dtype(self, prefix: str) -> tuple[np.dtype, int]:
        """(element type, layout) of IFM or IFM2: the precision's size field is bits 3:2."""
        return _precision(f"{prefix}_PRECISION", self.param(f"{prefix}_PRECISION"), 2)

    @view
    def ofm_dtype(self) -> tuple[np.dtype, int]:
        """(element type, layout) of the OFM: its precision's size field is bits 2:1."""
        return _precision("OFM_PRECISION", self.param("OFM_PRECISION"), 1)

    @view
    def rounding(self) -> int:
        mode = (self.param("OFM_PRECISION") >> 14) & 3
        if mode not in ROUNDING_NAMES:
            raise RegisterError(f"OFM_PRECISION: reserved rounding mode {mode}")
        return mode

    @view
    def ofm_scale(self) -> tuple[int, int]:
        """(multiplier, shift) of the OFM_SCALE register."""
        return self.payload("OFM_SCALE"), self.param("OFM_SCALE") & 0x3F

    @view
    def activation(self) -> tuple[int, int, int, int]:
        """(function, clip range, min, max)."""
        value = self.param("ACTIVATION")
        return (
            value & 0xFFF,
            (value >> 12) & 0xF,
            signed16(self.param("ACTIVATION_MIN")),
            signed16(self.param("ACTIVATION_MAX")),
        )

    @view
    def ifm_scale_mode(self) -> int:
        return (self.param("IFM_PRECISION") >> 8) & 3


def _precision(name: str, value: int, size_shift: int) -> tuple[np.dtype, int]:
    """A *_PRECISION register: bit 0 signed, a 2-bit size field at `size_shift`, the
    layout (NHWC or NHCWB16) in bits 7:6."""
    signed = bool(value & 1)
    size = (value >> size_shift) & 3
    if size not in _SIZE_BITS:
        raise RegisterError(f"{name} 0x{value:04x}: reserved activation precision {size}")
    layout = (value >> 6) & 3
    if layout > FORMAT_NHCWB16:
        raise RegisterError(f"{name} 0x{value:04x}: reserved format {layout}")
    return np.dtype(_DTYPES[(_SIZE_BITS[size], signed)]), layout
