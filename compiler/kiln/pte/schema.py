"""ExecuTorch's program format (.pte): its constants, enums, field slots and schema dataclasses.

Facts come from ExecuTorch 1.5.1: schema/program.fbs and schema/scalar_type.fbs (field
slots, union codes, enums), exir/_serialize/_program.py (file layout), exir/capture/
_config.py (segment alignment 128) and exir/tensor.py (tensor alignment 16).

A .pte file is a FlatBuffer (root table Program, file identifier ET12 at bytes 4..7),
optionally followed by segments. When segments are present an extended header sits at
byte 8 (the FlatBuffer is written without it, then the header is spliced in after the
identifier and the root offset grows by its padded length):

    bytes 8..11  b"eh00"         12..15 uint32 header length (32)
          16..23 program_size (header included)   24..31 segment_base_offset
          32..39 segment_data_size               (all little-endian)

segment_base_offset is program_size rounded up to the segment alignment; segment i lies at
segment_base_offset + segments[i].offset. ExecuTorch's serializer (and kiln.pte.writer's `serialize`)
orders segments: the constant segment first (always present: constant 0 is the reserved
empty placeholder; each constant is padded to the tensor alignment except the last, and
constant_segment.offsets lists where each starts), then one segment per distinct non-empty
delegate payload (processed.location = SEGMENT, index = segment index; an empty payload
stays INLINE), then one per distinct named-data blob (named_data[k].segment_index). Each
segment starts at the previous one's end rounded up to the segment alignment. Without
segment bytes (only the empty constant segment) no header is written.

kiln.pte.writer's `serialize` writes this layout with flatbuffers.Builder; kiln.pte.reader's
`deserialize` is a hand-written reader that checks every offset, size and cross-reference
(kiln.pte.validate's rules, shared with the writer) and raises PteError on anything malformed.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

# --- Constants of the format ----------------------------------------------------------

FILE_IDENTIFIER = b"ET12"
SCHEMA_VERSION = 0  # Program.version written by ExecuTorch 1.5.1 (exir/version.py)
EXTENDED_HEADER_MAGIC = b"eh00"
EXTENDED_HEADER_OFFSET = 8  # right after the root offset and the file identifier
EXTENDED_HEADER_MIN_LENGTH = 24  # magic, length, program_size, segment_base_offset
EXTENDED_HEADER_LENGTH = 32  # ... and segment_data_size, as 1.5.1 writes it
EXTENDED_HEADER_HEAD_BYTES = 64  # readers look for the header in this many leading bytes
SEGMENT_ALIGNMENT = 128  # ExecutorchBackendConfig.segment_alignment default
TENSOR_ALIGNMENT = 16  # constants inside the constant segment (exir.tensor.ALIGNMENT)
SCHEMA_MAX_ALIGNMENT = 16  # largest force_align in program.fbs; the header is padded to it


class ScalarType(IntEnum):
    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    QUINT4X2 = 16
    QUINT2X4 = 17
    BITS16 = 22
    FLOAT8E5M2 = 23
    FLOAT8E4M3FN = 24
    FLOAT8E5M2FNUZ = 25
    FLOAT8E4M3FNUZ = 26
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29


# Bytes per element (QUINT4X2/QUINT2X4 pack sub-byte values into one byte each).
ELEMENT_SIZE = {
    **dict.fromkeys(
        [
            ScalarType.BYTE,
            ScalarType.CHAR,
            ScalarType.BOOL,
            ScalarType.QINT8,
            ScalarType.QUINT8,
            ScalarType.QUINT4X2,
            ScalarType.QUINT2X4,
            ScalarType.FLOAT8E5M2,
            ScalarType.FLOAT8E4M3FN,
            ScalarType.FLOAT8E5M2FNUZ,
            ScalarType.FLOAT8E4M3FNUZ,
        ],
        1,
    ),
    **dict.fromkeys([ScalarType.SHORT, ScalarType.HALF, ScalarType.BFLOAT16, ScalarType.BITS16, ScalarType.UINT16], 2),
    **dict.fromkeys([ScalarType.INT, ScalarType.FLOAT, ScalarType.QINT32, ScalarType.UINT32], 4),
    **dict.fromkeys([ScalarType.LONG, ScalarType.DOUBLE, ScalarType.UINT64], 8),
}

# The element types kiln reads and writes, as numpy types. The codes are c10's ScalarType
# numbering, which ExecuTorch's kernels also take as their dtype argument; so the program
# stage uses them too (this module imports nothing of kiln's: any stage may).
NUMPY_DTYPES = {
    ScalarType.FLOAT: np.float32,
    ScalarType.CHAR: np.int8,
    ScalarType.SHORT: np.int16,
    ScalarType.INT: np.int32,
    ScalarType.LONG: np.int64,
    ScalarType.BOOL: np.bool_,
    ScalarType.BYTE: np.uint8,
}
SCALAR_TYPES = {np.dtype(t).name: code for code, t in NUMPY_DTYPES.items()}  # "float32" -> FLOAT, ...

# kiln's own named data: the TOSA graph each Ethos-U delegate was compiled from, under
# TOSA_KEY.format(delegate index). kiln.pte.from_program writes them for `kiln run-host`, which
# runs them on tosa_reference_model; runtimes look data up by key and ignore keys they do
# not know, and no firmware reads these, so the runner bakes a program without them
# (without_reference_data).
TOSA_KEY = "kiln/tosa/{}"
# The planned memory buffers (non_const_buffer_sizes' indices): 0 is reserved; kiln plans a
# method's tensors in 1 and a program's state in 2, as ExecuTorch places shared mutable buffers
# (its MemoryPlanningPass with share_mutable_buffers): at one offset in every method.
PLANNED_MEMORY_ID = 1
STATE_MEMORY_ID = 2


def tosa_key(plan: str, delegate: int) -> str:
    """The named-data key of the TOSA graph of delegate `delegate` of plan `plan`: TOSA_KEY's in
    plan "forward", else "kiln/tosa/<plan>/<delegate>"."""
    return TOSA_KEY.format(delegate) if plan == "forward" else TOSA_KEY.format(f"{plan}/{delegate}")


class TensorShapeDynamism(IntEnum):
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


class DataLocation(IntEnum):
    INLINE = 0  # index into Program.backend_delegate_data
    SEGMENT = 1  # index into Program.segments


class KernelTypes(IntEnum):
    """Type codes of the EValue union `KernelTypes` (0 = NONE, no value)."""

    NONE = 0
    Null = 1
    Int = 2
    Bool = 3
    Double = 4
    Tensor = 5
    String = 6
    IntList = 7
    DoubleList = 8
    BoolList = 9
    TensorList = 10
    OptionalTensorList = 11


class InstructionArguments(IntEnum):
    """Type codes of the Instruction union `InstructionArguments`."""

    NONE = 0
    KernelCall = 1
    DelegateCall = 2
    MoveCall = 3
    JumpFalseCall = 4
    FreeCall = 5


# Field slots (declaration order in program.fbs; a union takes two: its type, then its value).
class ProgramSlot(IntEnum):
    (
        version,
        execution_plan,
        constant_buffer,
        backend_delegate_data,
        segments,
        constant_segment,
        mutable_data_segments,
        named_data,
    ) = range(8)


class PlanSlot(IntEnum):
    (
        name,
        container_meta_type,
        values,
        inputs,
        outputs,
        chains,
        operators,
        delegates,
        non_const_buffer_sizes,
        non_const_buffer_device,
    ) = range(10)


class TensorSlot(IntEnum):
    (
        scalar_type,
        storage_offset,
        sizes,
        dim_order,
        requires_grad,
        data_buffer_idx,
        allocation_info,
        layout,
        shape_dynamism,
        extra_tensor_info,
    ) = range(10)


class ExtraTensorInfoSlot(IntEnum):
    mutable_data_segments_idx, fully_qualified_name, location, device_type, device_index = range(5)


class ChainSlot(IntEnum):
    inputs, outputs, instructions, stacktrace = range(4)


class FrameSlot(IntEnum):
    filename, lineno, name, context = range(4)


class DelegateSlot(IntEnum):
    id, processed, compile_specs = range(3)


# --- Schema dataclasses -------------------------------------------------------------
# Sequence fields accept any iterable and are stored as tuples, so values compare and hash.


def _freeze(obj, *names: str) -> None:
    for name in names:
        object.__setattr__(obj, name, tuple(getattr(obj, name)))


@dataclass(frozen=True)
class AllocationInfo:
    """Where a memory-planned tensor lives: non_const_buffer_sizes[memory_id] at an offset."""

    memory_id: int
    memory_offset_low: int
    memory_offset_high: int = 0

    @classmethod
    def at(cls, memory_id: int, offset: int) -> AllocationInfo:
        return cls(memory_id, offset & 0xFFFFFFFF, offset >> 32)

    @property
    def offset(self) -> int:
        return (self.memory_offset_high << 32) | self.memory_offset_low


@dataclass(frozen=True, kw_only=True)
class Tensor:
    """data_buffer_idx > 0: constant data (constant index, 0 is reserved for none);
    allocation_info: planned memory; neither: the data pointer is supplied at run time. `name`:
    extra_tensor_info.fully_qualified_name, which names a program's state (a mutable buffer);
    kiln reads and writes no other field of extra_tensor_info."""

    scalar_type: ScalarType
    sizes: Sequence[int]
    dim_order: Sequence[int]
    storage_offset: int = 0
    requires_grad: bool = False
    data_buffer_idx: int = 0
    allocation_info: AllocationInfo | None = None
    layout: int = 0
    shape_dynamism: TensorShapeDynamism = TensorShapeDynamism.STATIC
    name: str | None = None

    def __post_init__(self):
        _freeze(self, "sizes", "dim_order")

    @property
    def nbytes(self) -> int:
        return math.prod(self.sizes) * ELEMENT_SIZE[self.scalar_type]


@dataclass(frozen=True)
class Null:
    pass


@dataclass(frozen=True)
class Int:
    value: int


@dataclass(frozen=True)
class Bool:
    value: bool


@dataclass(frozen=True)
class Double:
    value: float


@dataclass(frozen=True)
class String:
    value: str


@dataclass(frozen=True)
class _Items:
    items: Sequence

    def __post_init__(self):
        _freeze(self, "items")


@dataclass(frozen=True)
class IntList(_Items):
    """items: indices of Int values (ExecuTorch boxes int lists)."""


@dataclass(frozen=True)
class DoubleList(_Items):
    """items: the floats themselves."""


@dataclass(frozen=True)
class BoolList(_Items):
    """items: the booleans themselves."""


@dataclass(frozen=True)
class TensorList(_Items):
    """items: indices of Tensor values."""


@dataclass(frozen=True)
class OptionalTensorList(_Items):
    """items: indices of Tensor values, -1 for None."""


EValue = (
    Null | Int | Bool | Double | String | IntList | DoubleList | BoolList | TensorList | OptionalTensorList | Tensor
)


@dataclass(frozen=True)
class KernelCall:
    """args: value indices; out-variant kernels list the out tensor and again as the result."""

    op_index: int
    args: Sequence[int]

    def __post_init__(self):
        _freeze(self, "args")


@dataclass(frozen=True)
class DelegateCall:
    delegate_index: int
    args: Sequence[int]

    def __post_init__(self):
        _freeze(self, "args")


@dataclass(frozen=True)
class MoveCall:
    move_from: int
    move_to: int


@dataclass(frozen=True)
class JumpFalseCall:
    cond_value_index: int
    destination_instruction: int


@dataclass(frozen=True)
class FreeCall:
    value_index: int


Instruction = KernelCall | DelegateCall | MoveCall | JumpFalseCall | FreeCall


@dataclass(frozen=True)
class Frame:
    filename: str
    lineno: int
    name: str
    context: str


@dataclass(frozen=True)
class Chain:
    """stacktrace: None, or one frame list per instruction."""

    inputs: Sequence[int]
    outputs: Sequence[int]
    instructions: Sequence[Instruction]
    stacktrace: Sequence[Sequence[Frame]] | None = None

    def __post_init__(self):
        _freeze(self, "inputs", "outputs", "instructions")
        if self.stacktrace is not None:
            object.__setattr__(self, "stacktrace", tuple(tuple(f) for f in self.stacktrace))


@dataclass(frozen=True)
class Operator:
    name: str
    overload: str = ""


@dataclass(frozen=True)
class DataReference:
    location: DataLocation
    index: int


@dataclass(frozen=True)
class DelegateCompileSpec:
    """program.fbs table CompileSpec: one key/value a backend delegate was compiled with
    (not kiln.spec.CompileSpec, what a compile is asked to do)."""

    key: str
    value: bytes

    def __post_init__(self):
        object.__setattr__(self, "value", bytes(self.value))


@dataclass(frozen=True)
class BackendDelegate:
    id: str
    processed: DataReference
    compile_specs: Sequence[DelegateCompileSpec] = ()

    def __post_init__(self):
        _freeze(self, "compile_specs")


@dataclass(frozen=True)
class ExecutionPlan:
    """non_const_buffer_sizes[0] is reserved (0); planned tensors use memory_id >= 1."""

    name: str
    values: Sequence[EValue]
    inputs: Sequence[int]
    outputs: Sequence[int]
    chains: Sequence[Chain]
    operators: Sequence[Operator]
    delegates: Sequence[BackendDelegate]
    non_const_buffer_sizes: Sequence[int]

    def __post_init__(self):
        _freeze(self, "values", "inputs", "outputs", "chains", "operators", "delegates", "non_const_buffer_sizes")


@dataclass(frozen=True)
class DataSegment:
    offset: int  # relative to the extended header's segment_base_offset
    size: int


@dataclass(frozen=True)
class SubsegmentOffsets:
    segment_index: int
    offsets: Sequence[int]

    def __post_init__(self):
        _freeze(self, "offsets")


@dataclass(frozen=True)
class NamedData:
    key: str
    segment_index: int


@dataclass(frozen=True)
class PteProgram:
    """program.fbs root table Program: what the FlatBuffer holds (kiln's own program before
    serialization is kiln.program.builder.Program). To write a program, give only
    execution_plans (and version): `serialize` fills the storage fields from the bytes it is
    given."""

    execution_plans: Sequence[ExecutionPlan]
    version: int = SCHEMA_VERSION
    constant_buffers: Sequence[bytes] = ()  # deprecated inline constants (old files)
    backend_delegate_data: Sequence[bytes] = ()  # inline delegate payloads
    segments: Sequence[DataSegment] = ()
    constant_segment: SubsegmentOffsets | None = None
    named_data: Sequence[NamedData] = ()

    def __post_init__(self):
        _freeze(self, "execution_plans", "constant_buffers", "backend_delegate_data", "segments", "named_data")


@dataclass(frozen=True)
class ExtendedHeader:
    program_size: int
    segment_base_offset: int
    segment_data_size: int | None  # None when the header is the 24-byte form
    length: int = EXTENDED_HEADER_LENGTH

    def encode(self) -> bytes:
        """The 32-byte header as ExecuTorch 1.5.1 writes it."""
        return struct.pack(
            "<4sIQQQ",
            EXTENDED_HEADER_MAGIC,
            EXTENDED_HEADER_LENGTH,
            self.program_size,
            self.segment_base_offset,
            self.segment_data_size or 0,
        )
