"""The Ethos-U delegate payload ("vela_bin_stream") of ExecuTorch's EthosUBackend.

Facts from ExecuTorch 1.5.1: backends/arm/arm_vela.py (vela_compile, vela_bin_pack_io: the
writer) and backends/arm/runtime/VelaBinStream.{h,cpp} (vela_bin_read: the reader).

The payload is a sequence of blocks. Each block is a 32-byte header, struct "<16sIB11s":
the name (at most 15 bytes, NUL-padded to 16), the unpadded data size (uint32), an
"external" flag (1: the data is a 64-character named-data key instead of the bytes) and 11
reserved zero bytes; then the data, zero-padded to a multiple of 16 bytes. The blocks, in
this order:

    vela_bin_stream  empty
    cmd_data         Vela's command stream; starts with b"COP1" or b"COP2"
    weight_data      weights and biases (base pointer region 0)
    scratch_size     uint32: bytes of scratch memory the command stream needs
    inputs, outputs  int32 count, then per tensor: int32 shape[6], elem_size, offset, region
    vela_end_stream  empty, and the payload ends right after it
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kiln.errors import PayloadError

DELEGATE_ID = "EthosUBackend"
# kiln's own compile specs on each Ethos-U delegate (ExecuTorch ignores unknown keys): the
# memory mode the stream was compiled for, and Vela's fast scratch size in decimal bytes
# (the firmware's delegate checks region 2 against it).
MEMORY_MODE_SPEC = "kiln.memory_mode"
FAST_SCRATCH_SPEC = "kiln.fast_scratch_size"
# ExecuTorch's Arm flow: the target, and Vela's command line (with --memory-mode=NAME and
# --system-config=NAME) as one space-separated string.
TARGET_SPEC = "target"
COMPILE_FLAGS_SPEC = "compile_flags"
BLOCK_NAME_LENGTH = 16
BLOCK_HEADER = struct.Struct("<16sIB11s")  # name, size, external, reserved
BLOCK_ALIGNMENT = 16
EXTERNAL_REFERENCE = 1
EXTERNAL_KEY_LENGTH = 64  # sha256 hex digest, as arm_vela.py makes the keys
STREAM_HEADER = "vela_bin_stream"
STREAM_FOOTER = "vela_end_stream"
BLOCK_ORDER = (STREAM_HEADER, "cmd_data", "weight_data", "scratch_size", "inputs", "outputs", STREAM_FOOTER)
COMMAND_STREAM_MAGICS = (b"COP1", b"COP2")
IO_SHAPE_DIMS = 6
IO_COUNT = struct.Struct("<i")
IO_TENSOR = struct.Struct(f"<{IO_SHAPE_DIMS}iiii")  # shape[6], elem_size, offset, region
SCRATCH_SIZE = struct.Struct("<I")

_INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class IoTensor:
    """An NPU input or output: its 6-D shape as Vela gives it, bytes per element, byte
    offset inside its region and the base-pointer region (1 = scratch) it lives in."""

    shape: Sequence[int]
    elem_size: int
    offset: int
    region: int

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if len(self.shape) != IO_SHAPE_DIMS:
            raise PayloadError(
                f"IoTensor shape {self.shape} has {len(self.shape)} dimensions; Vela gives {IO_SHAPE_DIMS}"
            )
        for name, value in [("shape", d) for d in self.shape] + [
            ("elem_size", self.elem_size),
            ("offset", self.offset),
            ("region", self.region),
        ]:
            if not _INT32[0] <= value <= _INT32[1]:
                raise PayloadError(f"IoTensor {name} {value} does not fit in int32")


@dataclass(frozen=True)
class VelaPayload:
    """A decoded payload. `external` maps the name of each block that was stored as a
    named-data key to that key (its bytes were resolved through `named_data`)."""

    cmd_data: bytes
    weight_data: bytes
    scratch_size: int
    inputs: tuple[IoTensor, ...]
    outputs: tuple[IoTensor, ...]
    external: Mapping[str, str] = field(default_factory=dict)


def compile_specs(delegate) -> dict[str, str]:
    """A pte.BackendDelegate's compile specs as text."""
    return {spec.key: spec.value.decode("utf-8", "replace") for spec in delegate.compile_specs}


def compiled_memory_mode(specs: Mapping[str, str]) -> str | None:
    """The memory mode a delegate's stream was compiled for: kiln's own spec, else the
    --memory-mode in ExecuTorch's compile flags; None when neither says."""
    return specs.get(MEMORY_MODE_SPEC) or _vela_flag(specs, "--memory-mode")


def compiled_fast_scratch(specs: Mapping[str, str]) -> int | None:
    """The fast scratch bytes kiln recorded from Vela (FAST_SCRATCH_SPEC); None when absent
    (ExecuTorch records none)."""
    value = specs.get(FAST_SCRATCH_SPEC)
    if value is None:
        return None
    if not value.isdigit():
        raise PayloadError(f"compile spec {FAST_SCRATCH_SPEC} is {value!r}, not a byte count")
    return int(value)


def compiled_system_config(specs: Mapping[str, str]) -> str | None:
    """The --system-config in ExecuTorch's compile flags, if any (kiln records it in the report)."""
    return _vela_flag(specs, "--system-config")


def _vela_flag(specs: Mapping[str, str], name: str) -> str | None:
    for flag in specs.get(COMPILE_FLAGS_SPEC, "").split():
        if flag.startswith(name + "="):
            return flag.split("=", 1)[1]
    return None


def _block(name: str, data: bytes) -> bytes:
    padded = -(-len(data) // BLOCK_ALIGNMENT) * BLOCK_ALIGNMENT
    header = BLOCK_HEADER.pack(name.encode("ascii"), len(data), 0, bytes(11))
    return header + data + bytes(padded - len(data))


def _pack_ios(ios: Sequence[IoTensor]) -> bytes:
    return IO_COUNT.pack(len(ios)) + b"".join(
        IO_TENSOR.pack(*io.shape, io.elem_size, io.offset, io.region) for io in ios
    )


def encode(
    cmd_data: bytes, weight_data: bytes, scratch_size: int, inputs: Sequence[IoTensor], outputs: Sequence[IoTensor]
) -> bytes:
    """The payload, byte for byte as ExecuTorch 1.5.1's vela_compile builds it from Vela's
    output (all blocks inline)."""
    if bytes(cmd_data[:4]) not in COMMAND_STREAM_MAGICS:
        raise PayloadError(
            f"cmd_data starts with {bytes(cmd_data[:4])!r}, not a Vela command "
            f"stream ({' or '.join(map(repr, COMMAND_STREAM_MAGICS))})"
        )
    if not 0 <= scratch_size < 2**32:
        raise PayloadError(f"scratch_size {scratch_size} does not fit in uint32")
    blocks = {
        STREAM_HEADER: b"",
        "cmd_data": bytes(cmd_data),
        "weight_data": bytes(weight_data),
        "scratch_size": SCRATCH_SIZE.pack(scratch_size),
        "inputs": _pack_ios(inputs),
        "outputs": _pack_ios(outputs),
        STREAM_FOOTER: b"",
    }
    return b"".join(_block(name, blocks[name]) for name in BLOCK_ORDER)


def _read_blocks(data: bytes) -> list[tuple[str, bytes, bool]]:
    """(name, data, external) of each block, checking headers, padding and the end."""
    if len(data) % BLOCK_ALIGNMENT:
        raise PayloadError(f"payload is {len(data)} bytes, not a multiple of {BLOCK_ALIGNMENT}")
    blocks, pos = [], 0
    while pos < len(data):
        if pos + BLOCK_HEADER.size > len(data):
            raise PayloadError(f"block header at offset {pos} is cut off")
        raw_name, size, external, reserved = BLOCK_HEADER.unpack_from(data, pos)
        name_bytes, nul, rest = raw_name.partition(b"\0")
        at = f"block {len(blocks)} at offset {pos}"
        if not nul or rest.strip(b"\0"):
            raise PayloadError(f"{at}: name {raw_name!r} is not a NUL-padded string")
        name = name_bytes.decode("ascii", "replace")
        if external not in (0, EXTERNAL_REFERENCE) or reserved.strip(b"\0"):
            raise PayloadError(
                f"{at} ({name}): external flag {external} or reserved bytes {reserved.hex()} are not valid"
            )
        start = pos + BLOCK_HEADER.size
        end = start + -(-size // BLOCK_ALIGNMENT) * BLOCK_ALIGNMENT
        if end > len(data):
            raise PayloadError(
                f"{at} ({name}): {size} bytes of data run past the end of the payload ({len(data)} bytes)"
            )
        if data[start + size : end].strip(b"\0"):
            raise PayloadError(f"{at} ({name}): padding after the data is not zero")
        blocks.append((name, bytes(data[start : start + size]), external == EXTERNAL_REFERENCE))
        pos = end
    return blocks


def _unpack_ios(name: str, data: bytes) -> tuple[IoTensor, ...]:
    if len(data) < IO_COUNT.size:
        raise PayloadError(f"{name} block has {len(data)} bytes, too few for its count")
    count = IO_COUNT.unpack_from(data)[0]
    if count < 0 or len(data) != IO_COUNT.size + count * IO_TENSOR.size:
        raise PayloadError(
            f"{name} block has {len(data)} bytes for a count of {count}; "
            f"expected {IO_COUNT.size} + {IO_TENSOR.size} per tensor"
        )
    ios = []
    for i in range(count):
        *shape, elem_size, offset, region = IO_TENSOR.unpack_from(data, 4 + i * IO_TENSOR.size)
        ios.append(IoTensor(shape, elem_size, offset, region))
    return tuple(ios)


def decode(data: bytes, named_data: Mapping[str, bytes] | None = None) -> VelaPayload:
    """Checks and decodes a payload. Blocks stored as named-data keys (external flag) are
    looked up in `named_data`. Raises PayloadError naming the block for anything that
    ExecuTorch's runtime would reject or that vela_compile cannot have written."""
    blocks = _read_blocks(bytes(data))
    names = [name for name, _, _ in blocks]
    if names != list(BLOCK_ORDER):
        raise PayloadError(f"blocks are {names}, expected {list(BLOCK_ORDER)}")
    contents, external = {}, {}
    for name, content, is_external in blocks:
        if is_external:
            if len(content) != EXTERNAL_KEY_LENGTH:
                raise PayloadError(
                    f"{name} block refers to named data with a {len(content)}-byte "
                    f"key; keys are {EXTERNAL_KEY_LENGTH} bytes"
                )
            key = content.decode("ascii", "replace")
            if named_data is None or key not in named_data:
                raise PayloadError(f"{name} block refers to named data {key!r}, which was not given")
            external[name], content = key, bytes(named_data[key])
        contents[name] = content
    for name in (STREAM_HEADER, STREAM_FOOTER):
        if contents[name]:
            raise PayloadError(f"{name} block holds {len(contents[name])} bytes; it must be empty")
    if contents["cmd_data"][:4] not in COMMAND_STREAM_MAGICS:
        raise PayloadError(
            f"cmd_data starts with {contents['cmd_data'][:4]!r}, not a Vela "
            f"command stream ({' or '.join(map(repr, COMMAND_STREAM_MAGICS))})"
        )
    if len(contents["scratch_size"]) != SCRATCH_SIZE.size:
        raise PayloadError(
            f"scratch_size block has {len(contents['scratch_size'])} bytes, expected {SCRATCH_SIZE.size}"
        )
    return VelaPayload(
        contents["cmd_data"],
        contents["weight_data"],
        SCRATCH_SIZE.unpack(contents["scratch_size"])[0],
        _unpack_ios("inputs", contents["inputs"]),
        _unpack_ios("outputs", contents["outputs"]),
        external,
    )
