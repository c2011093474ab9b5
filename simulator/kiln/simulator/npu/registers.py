"""The NPU's register state while it parses a command stream, and the typed views whose
fields sit in the same place on both families (feature-map geometry, kernel, stride,
dilation, padding, upscale, OFM scale mode). Each family's register file is a subclass
that reads the fields it lays out its own way (kiln.simulator.npu.u55.registers,
kiln.simulator.npu.u85.registers): addresses, element types, rounding, OFM scale and
activation. Unset registers read as zero, as after reset.

A frozen copy (Registers.frozen) is what a command stream's operation ran with, kept to run it
again: it refuses set(), and computes each typed view (a method marked @view, whose result is
immutable) once per arguments.
"""

from __future__ import annotations

import copy
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from kiln.errors import RegisterError
from kiln.simulator.npu.commands import Command

FORMAT_NHWC = 0
FORMAT_NHCWB16 = 1

ROUND_TFL, ROUND_TRUNCATE, ROUND_NATURAL = 0, 1, 2
ROUNDING_NAMES = {ROUND_TFL: "TFL", ROUND_TRUNCATE: "TRUNCATE", ROUND_NATURAL: "NATURAL"}
ROUND_FLOOR = 3  # not an Ethos-U55/U65 mode: the Ethos-U85's TRUNCATE_TO_LOWER

UPSCALE_NONE, UPSCALE_NEAREST, UPSCALE_TRANSPOSE = 0, 1, 2


def signed16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value


@dataclass(frozen=True)
class FeatureMap:
    """One feature map as the registers describe it (IFM, IFM2 or OFM)."""

    region: int
    bases: tuple[int, int, int, int]  # byte offsets inside the region, tiles 0..3
    height0: int  # rows of tiles 0 (and 2 below it)
    height1: int  # rows of tile 1 (and 3 below it)
    width0: int  # columns of tiles 0 and 2
    stride_x: int
    stride_y: int
    stride_c: int
    dtype: np.dtype
    layout: int  # FORMAT_NHWC or FORMAT_NHCWB16
    zero_point: int
    depth: int

    @functools.cached_property
    def elem_size(self) -> int:
        return np.dtype(self.dtype).itemsize

    @functools.cached_property
    def type_name(self) -> str:
        """The element type's name, e.g. "int8"."""
        return np.dtype(self.dtype).name

    @functools.cached_property
    def stored_type(self) -> np.dtype:
        """The element type as memory holds it: little-endian."""
        return np.dtype(self.dtype).newbyteorder("<")


@dataclass(frozen=True)
class Kernel:
    width: int  # taps
    height: int
    stride_x: int
    stride_y: int
    dilation_x: int
    dilation_y: int
    part_kernel_first: bool


@dataclass(frozen=True)
class Padding:
    top: int
    left: int
    bottom: int
    right: int


_UNSET = object()  # a view not computed yet


def view(method):
    """Marks a typed view of the registers: a frozen register file computes it once per
    arguments (the result must be immutable; an exception is raised again each time)."""

    @functools.wraps(method)
    def memoized(self, *args):
        views = self._views
        if views is None:
            return method(self, *args)
        key = (method, args)
        value = views.get(key, _UNSET)
        if value is _UNSET:
            value = views[key] = method(self, *args)
        return value

    return memoized


class Registers(ABC):
    """The last value written to every register: cmd0 parameters by name, cmd1 as
    (parameter, payload). A family's subclass reads the fields it lays out its own way."""

    def __init__(self):
        self.values: dict[str, int] = {}
        self.payloads: dict[str, int] = {}
        self._views: dict | None = None  # a frozen copy's typed views, by (method, arguments)

    def frozen(self) -> Registers:
        """A copy that later commands do not change, which computes each typed view once."""
        copied = copy.copy(self)
        copied.values = dict(self.values)
        copied.payloads = dict(self.payloads)
        copied._views = {}
        return copied

    def set(self, command: Command) -> None:
        if self._views is not None:
            raise TypeError("a frozen register file takes no commands")
        self.values[command.name] = command.param
        if command.payload is not None:
            self.payloads[command.name] = command.payload

    def param(self, name: str) -> int:
        return self.values.get(name, 0)

    def payload(self, name: str) -> int:
        return self.payloads.get(name, 0)

    # the family's own field layouts --------------------------------------------------

    @abstractmethod
    def address(self, name: str) -> int:
        """A cmd1 address register: its payload, and above it the address bits its
        parameter holds."""

    @abstractmethod
    def ifm_dtype(self, prefix: str) -> tuple[np.dtype, int]:
        """(element type, layout) of IFM or IFM2."""

    @abstractmethod
    def ofm_dtype(self) -> tuple[np.dtype, int]:
        """(element type, layout) of the OFM."""

    @abstractmethod
    def rounding(self) -> int:
        """The rounding of the OFM's rescale (ROUND_*)."""

    @abstractmethod
    def ofm_scale(self) -> tuple[int, int]:
        """(multiplier, shift) of the OFM_SCALE register."""

    # typed views -------------------------------------------------------------------

    @view
    def feature_map(self, prefix: str) -> FeatureMap:
        """prefix: "IFM", "IFM2" or "OFM"."""
        if prefix == "OFM":
            dtype, layout = self.ofm_dtype()
            depth = self.param("OFM_DEPTH_M1") + 1
        else:
            dtype, layout = self.ifm_dtype(prefix)
            depth = self.param("IFM_DEPTH_M1") + 1  # IFM2 has the IFM's depth unless broadcast
        zero_point = self.param(f"{prefix}_ZERO_POINT")
        zero_point = zero_point if dtype.kind == "u" else signed16(zero_point)
        return FeatureMap(
            region=self.param(f"{prefix}_REGION") & 7,
            bases=tuple(self.address(f"{prefix}_BASE{i}") for i in range(4)),
            height0=self.param(f"{prefix}_HEIGHT0_M1") + 1,
            height1=self.param(f"{prefix}_HEIGHT1_M1") + 1,
            width0=self.param(f"{prefix}_WIDTH0_M1") + 1,
            stride_x=self.address(f"{prefix}_STRIDE_X"),
            stride_y=self.address(f"{prefix}_STRIDE_Y"),
            stride_c=self.address(f"{prefix}_STRIDE_C"),
            dtype=dtype,
            layout=layout,
            zero_point=zero_point,
            depth=depth,
        )

    @view
    def ofm_shape(self) -> tuple[int, int, int]:
        return (self.param("OFM_HEIGHT_M1") + 1, self.param("OFM_WIDTH_M1") + 1, self.param("OFM_DEPTH_M1") + 1)

    @view
    def kernel(self) -> Kernel:
        stride = self.param("KERNEL_STRIDE")
        dilation_x = ((stride >> 3) & 1) + 1
        dilation_y = ((stride >> 4) & 1) + 1
        extent_w = self.param("KERNEL_WIDTH_M1")
        extent_h = self.param("KERNEL_HEIGHT_M1")
        if extent_w % dilation_x or extent_h % dilation_y:
            raise RegisterError(
                f"kernel extent {extent_w + 1}x{extent_h + 1} does not fit dilation {dilation_x}x{dilation_y}"
            )
        return Kernel(
            width=extent_w // dilation_x + 1,
            height=extent_h // dilation_y + 1,
            stride_x=((stride & 1) | (((stride >> 6) & 7) << 1)) + 1,
            stride_y=(((stride >> 1) & 1) | (((stride >> 9) & 7) << 1)) + 1,
            dilation_x=dilation_x,
            dilation_y=dilation_y,
            part_kernel_first=bool(stride & 4),
        )

    @view
    def padding(self) -> Padding:
        return Padding(
            self.param("IFM_PAD_TOP"),
            self.param("IFM_PAD_LEFT"),
            self.param("IFM_PAD_BOTTOM"),
            self.param("IFM_PAD_RIGHT"),
        )

    @view
    def global_scale(self) -> bool:
        return bool((self.param("OFM_PRECISION") >> 8) & 1)

    @view
    def upscale(self) -> int:
        mode = self.param("IFM_UPSCALE") & 3
        if mode > UPSCALE_TRANSPOSE:
            raise RegisterError(f"IFM_UPSCALE: reserved mode {mode}")
        return mode
