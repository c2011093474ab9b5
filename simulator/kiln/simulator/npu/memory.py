"""The NPU's view of memory: 64-bit bus addresses (region base + offset)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from kiln.errors import MemoryFault


class Memory(Protocol):
    def read(self, address: int, size: int) -> bytes | memoryview: ...

    def write(self, address: int, data: bytes | memoryview | np.ndarray) -> None: ...


class FlatMemory:
    """Named byte ranges at bus addresses; an access must lie entirely inside one range.

    The buffers are owned by the caller and written in place, so the caller sees the
    NPU's outputs in its own bytearrays."""

    def __init__(self, ranges: dict[int, bytearray] | None = None):
        self._ranges: list[tuple[int, int, memoryview]] = []
        for base, buffer in (ranges or {}).items():
            self.add(base, buffer)

    def add(self, base: int, buffer: bytearray) -> None:
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise TypeError("FlatMemory needs writable buffers (bytearray or writable numpy array)")
        end = base + len(view)
        for other_base, other_end, _ in self._ranges:
            if base < other_end and other_base < end:
                raise ValueError(f"range 0x{base:x}..0x{end:x} overlaps 0x{other_base:x}..0x{other_end:x}")
        self._ranges.append((base, end, view))
        self._ranges.sort(key=lambda r: r[0])

    def _find(self, address: int, size: int, access: str) -> tuple[memoryview, int]:
        for base, end, view in self._ranges:
            if base <= address and address + size <= end:
                return view, address - base
        raise MemoryFault(address, size, access)

    def read(self, address: int, size: int) -> memoryview:
        view, offset = self._find(address, size, "read")
        return view[offset : offset + size]

    def write(self, address: int, data) -> None:
        raw = (
            memoryview(np.ascontiguousarray(data)).cast("B")
            if isinstance(data, np.ndarray)
            else memoryview(data).cast("B")
        )
        view, offset = self._find(address, len(raw), "write")
        view[offset : offset + len(raw)] = raw
