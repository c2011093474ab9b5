"""What the simulator takes of a compiled NPU program: its public interface to the compiler.

The simulator imports nothing of the compiler's. A caller hands it any object with these
attributes (structural typing): kiln.lower.vela's VelaResult and the decoded Ethos-U
delegate payload of kiln.lower.ethosu_payload both have them, and tests/compiler checks so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class NpuTensor(Protocol):
    """An NPU input or output as Vela places it: its 6-D shape, bytes per element, byte
    offset inside its region and the base-pointer region (1 = scratch) it lives in."""

    shape: Sequence[int]
    elem_size: int
    offset: int
    region: int


@runtime_checkable
class CompiledNpuProgram(Protocol):
    """One Vela-compiled command stream and what it needs. An object may also carry
    `fast_scratch_size` (bytes of region 2; 0 or absent: none)."""

    cmd_data: bytes  # the command stream, starting with b"COP1"
    weight_data: bytes  # region 0, read only
    scratch_size: int  # bytes of region 1, which holds the inputs and outputs
    inputs: Sequence[NpuTensor]
    outputs: Sequence[NpuTensor]


def tensor_bytes(tensor: NpuTensor) -> int:
    """Bytes of an NPU input or output."""
    return int(np.prod(tensor.shape)) * tensor.elem_size
