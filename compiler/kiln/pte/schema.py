"""ExecuTorch's program format (.pte): constants, schema dataclasses, writer and reader.

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
segment_base_offset + segments[i].offset. ExecuTorch's serializer (and `serialize` here)
orders segments: the constant segment first (always present: constant 0 is the reserved
empty placeholder; each constant is padded to the tensor alignment except the last, and
constant_segment.offsets lists where each starts), then one segment per distinct non-empty
delegate payload (processed.location = SEGMENT, index = segment index; an empty payload
stays INLINE), then one per distinct named-data blob (named_data[k].segment_index). Each
segment starts at the previous one's end rounded up to the segment alignment. Without
segment bytes (only the empty constant segment) no header is written.

`serialize` writes with flatbuffers.Builder; `deserialize` is a hand-written reader that
checks every offset, size and cross-reference and raises PteError on anything malformed.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Mapping, Sequence, Union

import flatbuffers
import numpy as np

from kiln.errors import PteError


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
    **dict.fromkeys([ScalarType.BYTE, ScalarType.CHAR, ScalarType.BOOL, ScalarType.QINT8,
                     ScalarType.QUINT8, ScalarType.QUINT4X2, ScalarType.QUINT2X4,
                     ScalarType.FLOAT8E5M2, ScalarType.FLOAT8E4M3FN,
                     ScalarType.FLOAT8E5M2FNUZ, ScalarType.FLOAT8E4M3FNUZ], 1),
    **dict.fromkeys([ScalarType.SHORT, ScalarType.HALF, ScalarType.BFLOAT16,
                     ScalarType.BITS16, ScalarType.UINT16], 2),
    **dict.fromkeys([ScalarType.INT, ScalarType.FLOAT, ScalarType.QINT32, ScalarType.UINT32], 4),
    **dict.fromkeys([ScalarType.LONG, ScalarType.DOUBLE, ScalarType.UINT64], 8),
}

# The element types kiln reads and writes, as numpy types. The codes are c10's ScalarType
# numbering, which ExecuTorch's kernels also take as their dtype argument; so the program
# stage uses them too (this module imports nothing of kiln's but errors: any stage may).
NUMPY_DTYPES = {
    ScalarType.FLOAT: np.float32, ScalarType.CHAR: np.int8, ScalarType.SHORT: np.int16,
    ScalarType.INT: np.int32, ScalarType.LONG: np.int64, ScalarType.BOOL: np.bool_,
    ScalarType.BYTE: np.uint8,
}
SCALAR_TYPES = {np.dtype(t).name: code for code, t in NUMPY_DTYPES.items()}  # "float32" -> FLOAT, ...

# kiln's own named data: the TOSA graph each Ethos-U delegate was compiled from, under
# TOSA_KEY.format(delegate index). kiln.pte.from_program writes them for `kiln run-host`, which
# runs them on tosa_reference_model; runtimes look data up by key and ignore keys they do
# not know, and no firmware reads these, so the runner bakes a program without them
# (without_reference_data).
TOSA_KEY = "kiln/tosa/{}"


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
class _Program(IntEnum):
    version, execution_plan, constant_buffer, backend_delegate_data, segments, \
        constant_segment, mutable_data_segments, named_data = range(8)


class _Plan(IntEnum):
    name, container_meta_type, values, inputs, outputs, chains, operators, delegates, \
        non_const_buffer_sizes, non_const_buffer_device = range(10)


class _Tensor(IntEnum):
    scalar_type, storage_offset, sizes, dim_order, requires_grad, data_buffer_idx, \
        allocation_info, layout, shape_dynamism, extra_tensor_info = range(10)


class _Chain(IntEnum):
    inputs, outputs, instructions, stacktrace = range(4)


class _Frame(IntEnum):
    filename, lineno, name, context = range(4)


class _Delegate(IntEnum):
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
    def at(cls, memory_id: int, offset: int) -> "AllocationInfo":
        return cls(memory_id, offset & 0xFFFFFFFF, offset >> 32)

    @property
    def offset(self) -> int:
        return (self.memory_offset_high << 32) | self.memory_offset_low


@dataclass(frozen=True, kw_only=True)
class Tensor:
    """data_buffer_idx > 0: constant data (constant index, 0 is reserved for none);
    allocation_info: planned memory; neither: the data pointer is supplied at run time."""

    scalar_type: ScalarType
    sizes: Sequence[int]
    dim_order: Sequence[int]
    storage_offset: int = 0
    requires_grad: bool = False
    data_buffer_idx: int = 0
    allocation_info: AllocationInfo | None = None
    layout: int = 0
    shape_dynamism: TensorShapeDynamism = TensorShapeDynamism.STATIC

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


EValue = Union[Null, Int, Bool, Double, String, IntList, DoubleList, BoolList, TensorList,
               OptionalTensorList, Tensor]
_EVALUE_CODE = {Null: KernelTypes.Null, Int: KernelTypes.Int, Bool: KernelTypes.Bool,
                Double: KernelTypes.Double, Tensor: KernelTypes.Tensor,
                String: KernelTypes.String, IntList: KernelTypes.IntList,
                DoubleList: KernelTypes.DoubleList, BoolList: KernelTypes.BoolList,
                TensorList: KernelTypes.TensorList,
                OptionalTensorList: KernelTypes.OptionalTensorList}


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


Instruction = Union[KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall]
_INSTRUCTION_CODE = {KernelCall: InstructionArguments.KernelCall,
                     DelegateCall: InstructionArguments.DelegateCall,
                     MoveCall: InstructionArguments.MoveCall,
                     JumpFalseCall: InstructionArguments.JumpFalseCall,
                     FreeCall: InstructionArguments.FreeCall}


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
        _freeze(self, "values", "inputs", "outputs", "chains", "operators", "delegates",
                "non_const_buffer_sizes")


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
        _freeze(self, "execution_plans", "constant_buffers", "backend_delegate_data",
                "segments", "named_data")


@dataclass(frozen=True)
class ExtendedHeader:
    program_size: int
    segment_base_offset: int
    segment_data_size: int | None  # None when the header is the 24-byte form
    length: int = EXTENDED_HEADER_LENGTH

    def encode(self) -> bytes:
        """The 32-byte header as ExecuTorch 1.5.1 writes it."""
        return struct.pack("<4sIQQQ", EXTENDED_HEADER_MAGIC, EXTENDED_HEADER_LENGTH,
                           self.program_size, self.segment_base_offset,
                           self.segment_data_size or 0)


# --- Checks shared by writer and reader ---------------------------------------------

def _check_index(index: int, count: int, what: str) -> None:
    if not 0 <= index < count:
        raise PteError(f"{what} is {index}, outside 0..{count - 1}" if count
                       else f"{what} is {index}, but there is nothing to refer to")


def _check_plan(plan: ExecutionPlan, p: str, n_constants: int,
                delegate_targets: Mapping[DataLocation, int]) -> None:
    """Cross-references inside a plan. n_constants counts the reserved constant 0;
    delegate_targets gives, per allowed location, how many entries it can index."""
    n_values = len(plan.values)
    for i, v in enumerate(plan.values):
        at = f"{p}.values[{i}]"
        if isinstance(v, (IntList, TensorList)):
            for j, item in enumerate(v.items):
                _check_index(item, n_values, f"{at}.items[{j}]")
        elif isinstance(v, OptionalTensorList):
            for j, item in enumerate(v.items):
                if item != -1:
                    _check_index(item, n_values, f"{at}.items[{j}]")
        elif isinstance(v, Tensor):
            _check_tensor(v, at, n_constants, plan.non_const_buffer_sizes)
    for name in ("inputs", "outputs"):
        for j, index in enumerate(getattr(plan, name)):
            _check_index(index, n_values, f"{p}.{name}[{j}]")
    for c, chain in enumerate(plan.chains):
        at = f"{p}.chains[{c}]"
        for name in ("inputs", "outputs"):
            for j, index in enumerate(getattr(chain, name)):
                _check_index(index, n_values, f"{at}.{name}[{j}]")
        if chain.stacktrace is not None and len(chain.stacktrace) != len(chain.instructions):
            raise PteError(f"{at}.stacktrace has {len(chain.stacktrace)} entries for "
                           f"{len(chain.instructions)} instructions")
        for k, ins in enumerate(chain.instructions):
            _check_instruction(ins, f"{at}.instructions[{k}]", plan, len(chain.instructions))
    for d, delegate in enumerate(plan.delegates):
        ref, at = delegate.processed, f"{p}.delegates[{d}].processed"
        if ref.location not in delegate_targets:
            raise PteError(f"{at}.location is {ref.location!r}, expected one of "
                           f"{[loc.name for loc in delegate_targets]}")
        _check_index(ref.index, delegate_targets[ref.location], f"{at}.index")


def _check_instruction(ins: Instruction, at: str, plan: ExecutionPlan, n_ins: int) -> None:
    n_values = len(plan.values)
    if isinstance(ins, KernelCall):
        _check_index(ins.op_index, len(plan.operators), f"{at}.op_index")
        for j, a in enumerate(ins.args):
            _check_index(a, n_values, f"{at}.args[{j}]")
    elif isinstance(ins, DelegateCall):
        _check_index(ins.delegate_index, len(plan.delegates), f"{at}.delegate_index")
        for j, a in enumerate(ins.args):
            _check_index(a, n_values, f"{at}.args[{j}]")
    elif isinstance(ins, MoveCall):
        _check_index(ins.move_from, n_values, f"{at}.move_from")
        _check_index(ins.move_to, n_values, f"{at}.move_to")
    elif isinstance(ins, JumpFalseCall):
        _check_index(ins.cond_value_index, n_values, f"{at}.cond_value_index")
        _check_index(ins.destination_instruction, n_ins + 1, f"{at}.destination_instruction")
    elif isinstance(ins, FreeCall):
        _check_index(ins.value_index, n_values, f"{at}.value_index")
    else:
        raise PteError(f"{at} is a {type(ins).__name__}, not an instruction")


def _check_tensor(t: Tensor, at: str, n_constants: int, buffer_sizes: Sequence[int]) -> None:
    if t.scalar_type not in ELEMENT_SIZE:
        raise PteError(f"{at}.scalar_type {t.scalar_type} is not a ScalarType")
    if any(s < 0 for s in t.sizes):
        raise PteError(f"{at}.sizes {list(t.sizes)} has a negative size")
    if sorted(t.dim_order) != list(range(len(t.sizes))):
        raise PteError(f"{at}.dim_order {list(t.dim_order)} is not a permutation of the "
                       f"{len(t.sizes)} dimensions")
    if t.data_buffer_idx:
        if t.allocation_info is not None:
            raise PteError(f"{at} has both constant data and allocation_info (a mutable "
                           "tensor with initial state): not supported")
        _check_index(t.data_buffer_idx, n_constants, f"{at}.data_buffer_idx")
    if t.allocation_info is not None:
        a = t.allocation_info
        if not 1 <= a.memory_id < len(buffer_sizes):
            raise PteError(f"{at}.allocation_info.memory_id is {a.memory_id}; the plan has "
                           f"planned buffers 1..{len(buffer_sizes) - 1}")
        if a.offset + t.nbytes > buffer_sizes[a.memory_id]:
            raise PteError(f"{at}: {t.nbytes} bytes at offset {a.offset} overrun planned "
                           f"buffer {a.memory_id} ({buffer_sizes[a.memory_id]} bytes)")


# --- Writer ---------------------------------------------------------------------------

# kind -> (struct code, size, Builder slot method, smallest, largest)
_SCALAR = {
    "bool": ("B", 1, "PrependBoolSlot", 0, 1),
    "i8": ("b", 1, "PrependInt8Slot", -2**7, 2**7 - 1),
    "u8": ("B", 1, "PrependUint8Slot", 0, 2**8 - 1),
    "i32": ("i", 4, "PrependInt32Slot", -2**31, 2**31 - 1),
    "u32": ("I", 4, "PrependUint32Slot", 0, 2**32 - 1),
    "i64": ("q", 8, "PrependInt64Slot", -2**63, 2**63 - 1),
    "u64": ("Q", 8, "PrependUint64Slot", 0, 2**64 - 1),
    "f64": ("d", 8, "PrependFloat64Slot", None, None),
}


class _Writer:
    def __init__(self) -> None:
        self.b = flatbuffers.Builder(4096)

    @staticmethod
    def _check(kind: str, value, what: str) -> None:
        lo, hi = _SCALAR[kind][3:]
        if lo is not None and not lo <= value <= hi:
            raise PteError(f"{what} is {value}, outside the range of {kind} ({lo}..{hi})")

    def _raw_vector(self, elem_size: int, count: int, raw: bytes, alignment: int) -> int:
        b = self.b
        b.StartVector(elem_size, count, alignment)
        b.head = b.Head() - len(raw)
        b.Bytes[b.Head():b.Head() + len(raw)] = raw
        return b.EndVector()

    def scalars(self, kind: str, items: Sequence, what: str) -> int:
        code, size = _SCALAR[kind][:2]
        for j, v in enumerate(items):
            self._check(kind, v, f"{what}[{j}]")
        return self._raw_vector(size, len(items), struct.pack(f"<{len(items)}{code}", *items), size)

    def blob(self, data: bytes, alignment: int = 1) -> int:
        return self._raw_vector(1, len(data), bytes(data), alignment)

    def string(self, s: str) -> int:
        return self.b.CreateString(s.encode("utf-8"))

    def tables(self, offsets: Sequence[int]) -> int:
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def table(self, n_slots: int, fields: Sequence[tuple], what: str) -> int:
        """fields: (slot, kind, value); kind "off" is an offset from this builder (0 = absent)."""
        b = self.b
        b.StartObject(n_slots)
        for slot, kind, value in fields:
            if kind == "off":
                if value:
                    b.PrependUOffsetTRelativeSlot(slot, value, 0)
            else:
                self._check(kind, value, f"{what} field {slot}")
                getattr(b, _SCALAR[kind][2])(slot, value, 0)
        return b.EndObject()

    # Schema tables, children first (FlatBuffers are built back to front).

    def tensor(self, t: Tensor, at: str) -> int:
        sizes = self.scalars("i32", t.sizes, f"{at}.sizes")
        dim_order = self.scalars("u8", t.dim_order, f"{at}.dim_order")
        alloc = 0
        if t.allocation_info is not None:
            a = t.allocation_info
            alloc = self.table(3, [(0, "u32", a.memory_id), (1, "u32", a.memory_offset_low),
                                   (2, "u32", a.memory_offset_high)], f"{at}.allocation_info")
        return self.table(len(_Tensor), [
            (_Tensor.scalar_type, "i8", int(t.scalar_type)),
            (_Tensor.storage_offset, "i32", t.storage_offset),
            (_Tensor.sizes, "off", sizes), (_Tensor.dim_order, "off", dim_order),
            (_Tensor.requires_grad, "bool", bool(t.requires_grad)),
            (_Tensor.data_buffer_idx, "u32", t.data_buffer_idx),
            (_Tensor.allocation_info, "off", alloc), (_Tensor.layout, "i8", t.layout),
            (_Tensor.shape_dynamism, "i8", int(t.shape_dynamism))], at)

    def evalue(self, v: EValue, at: str) -> int:
        code = _EVALUE_CODE.get(type(v))
        if code is None:
            raise PteError(f"{at} is a {type(v).__name__}, not a value kind")
        if isinstance(v, Null):
            val = self.table(0, [], at)
        elif isinstance(v, Tensor):
            val = self.tensor(v, at)
        elif isinstance(v, (Int, Bool, Double)):
            kind = {Int: "i64", Bool: "bool", Double: "f64"}[type(v)]
            val = self.table(1, [(0, kind, v.value)], at)
        elif isinstance(v, String):
            val = self.table(1, [(0, "off", self.string(v.value))], at)
        else:
            kind = {IntList: "i64", DoubleList: "f64", BoolList: "bool",
                    TensorList: "i32", OptionalTensorList: "i32"}[type(v)]
            val = self.table(1, [(0, "off", self.scalars(kind, v.items, f"{at}.items"))], at)
        return self.table(2, [(0, "u8", int(code)), (1, "off", val)], at)

    def instruction(self, ins: Instruction, at: str) -> int:
        if isinstance(ins, KernelCall):
            args = self.scalars("i32", ins.args, f"{at}.args")
            val = self.table(2, [(0, "i32", ins.op_index), (1, "off", args)], at)
        elif isinstance(ins, DelegateCall):
            args = self.scalars("i32", ins.args, f"{at}.args")
            val = self.table(2, [(0, "i32", ins.delegate_index), (1, "off", args)], at)
        elif isinstance(ins, MoveCall):
            val = self.table(2, [(0, "i32", ins.move_from), (1, "i32", ins.move_to)], at)
        elif isinstance(ins, JumpFalseCall):
            val = self.table(2, [(0, "i32", ins.cond_value_index),
                                 (1, "i32", ins.destination_instruction)], at)
        else:
            val = self.table(1, [(0, "i32", ins.value_index)], at)
        return self.table(2, [(0, "u8", int(_INSTRUCTION_CODE[type(ins)])), (1, "off", val)], at)

    def chain(self, c: Chain, at: str) -> int:
        inputs = self.scalars("i32", c.inputs, f"{at}.inputs")
        outputs = self.scalars("i32", c.outputs, f"{at}.outputs")
        instructions = self.tables([self.instruction(ins, f"{at}.instructions[{k}]")
                                    for k, ins in enumerate(c.instructions)])
        stacktrace = 0
        if c.stacktrace is not None:
            lists = []
            for k, frames in enumerate(c.stacktrace):
                offs = [self.table(len(_Frame), [
                    (_Frame.filename, "off", self.string(f.filename)),
                    (_Frame.lineno, "i32", f.lineno), (_Frame.name, "off", self.string(f.name)),
                    (_Frame.context, "off", self.string(f.context))], f"{at}.stacktrace[{k}]")
                    for f in frames]
                lists.append(self.table(1, [(0, "off", self.tables(offs))], f"{at}.stacktrace"))
            stacktrace = self.tables(lists)
        return self.table(len(_Chain), [
            (_Chain.inputs, "off", inputs), (_Chain.outputs, "off", outputs),
            (_Chain.instructions, "off", instructions), (_Chain.stacktrace, "off", stacktrace)], at)

    def delegate(self, d: BackendDelegate, at: str) -> int:
        id_ = self.string(d.id)
        processed = self.table(2, [(0, "i8", int(d.processed.location)),
                                   (1, "u32", d.processed.index)], f"{at}.processed")
        specs = self.tables([self.table(2, [(0, "off", self.string(s.key)),
                                            (1, "off", self.blob(s.value))], f"{at}.compile_specs")
                             for s in d.compile_specs])
        return self.table(len(_Delegate), [(_Delegate.id, "off", id_),
                                           (_Delegate.processed, "off", processed),
                                           (_Delegate.compile_specs, "off", specs)], at)

    def plan(self, plan: ExecutionPlan, at: str) -> int:
        name = self.string(plan.name)
        values = self.tables([self.evalue(v, f"{at}.values[{i}]") for i, v in enumerate(plan.values)])
        inputs = self.scalars("i32", plan.inputs, f"{at}.inputs")
        outputs = self.scalars("i32", plan.outputs, f"{at}.outputs")
        chains = self.tables([self.chain(c, f"{at}.chains[{i}]") for i, c in enumerate(plan.chains)])
        operators = self.tables([self.table(2, [(0, "off", self.string(o.name)),
                                                (1, "off", self.string(o.overload))], f"{at}.operators")
                                 for o in plan.operators])
        delegates = self.tables([self.delegate(d, f"{at}.delegates[{i}]")
                                 for i, d in enumerate(plan.delegates)])
        sizes = self.scalars("i64", plan.non_const_buffer_sizes, f"{at}.non_const_buffer_sizes")
        return self.table(len(_Plan), [
            (_Plan.name, "off", name), (_Plan.values, "off", values), (_Plan.inputs, "off", inputs),
            (_Plan.outputs, "off", outputs), (_Plan.chains, "off", chains),
            (_Plan.operators, "off", operators), (_Plan.delegates, "off", delegates),
            (_Plan.non_const_buffer_sizes, "off", sizes)], at)

    def program(self, p: PteProgram) -> bytes:
        plans = self.tables([self.plan(plan, f"execution_plan[{i}]")
                             for i, plan in enumerate(p.execution_plans)])
        buffers = self.tables([self.table(1, [(0, "off", self.blob(s, SCHEMA_MAX_ALIGNMENT))],
                                          "constant_buffer") for s in p.constant_buffers])
        inline = self.tables([self.table(1, [(0, "off", self.blob(s, SCHEMA_MAX_ALIGNMENT))],
                                         "backend_delegate_data") for s in p.backend_delegate_data])
        segments = self.tables([self.table(2, [(0, "u64", s.offset), (1, "u64", s.size)],
                                           f"segments[{i}]") for i, s in enumerate(p.segments)])
        constant_segment = 0
        if p.constant_segment is not None:
            cs = p.constant_segment
            offsets = self.scalars("u64", cs.offsets, "constant_segment.offsets")
            constant_segment = self.table(2, [(0, "u32", cs.segment_index), (1, "off", offsets)],
                                          "constant_segment")
        named = self.tables([self.table(2, [(0, "off", self.string(n.key)),
                                            (1, "u32", n.segment_index)], f"named_data[{i}]")
                             for i, n in enumerate(p.named_data)])
        root = self.table(len(_Program), [
            (_Program.version, "u32", p.version), (_Program.execution_plan, "off", plans),
            (_Program.constant_buffer, "off", buffers),
            (_Program.backend_delegate_data, "off", inline), (_Program.segments, "off", segments),
            (_Program.constant_segment, "off", constant_segment),
            (_Program.named_data, "off", named)], "Program")
        self.b.Finish(root, file_identifier=FILE_IDENTIFIER)
        return bytes(self.b.Output())


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def serialize(program: PteProgram, *, constants: Sequence[bytes] = (),
              delegate_payloads: Sequence[bytes] = (), named_data: Mapping[str, bytes] = {},
              segment_alignment: int = SEGMENT_ALIGNMENT,
              tensor_alignment: int = TENSOR_ALIGNMENT) -> bytes:
    """The .pte bytes of `program`, laid out as ExecuTorch 1.5.1's serializer does with
    extract_delegate_segments=True (the default of to_executorch()).

    program: its storage fields (constant_buffers, backend_delegate_data, segments,
        constant_segment, named_data) must be empty; the writer fills them.
    constants: a tensor with data_buffer_idx = i (i >= 1) gets constants[i - 1]
        (constant 0 is the reserved empty placeholder).
    delegate_payloads: a delegate whose processed is (INLINE, k) gets delegate_payloads[k];
        every payload must be used. Non-empty payloads move to segments (identical ones share
        one segment) and the delegate then says (SEGMENT, segment index).
    named_data: key -> bytes, one segment per distinct blob, in key order.
    Raises PteError if the program refers to anything it does not have.
    """
    for name in ("constant_buffers", "backend_delegate_data", "segments", "named_data"):
        if getattr(program, name):
            raise PteError(f"Program.{name} must be empty: serialize lays out the data itself")
    if program.constant_segment is not None:
        raise PteError("Program.constant_segment must be None: serialize lays out the data itself")
    for alignment, what in ((segment_alignment, "segment_alignment"),
                            (tensor_alignment, "tensor_alignment")):
        if alignment < 1 or alignment & (alignment - 1):
            raise PteError(f"{what} {alignment} is not a power of two")
    for i, plan in enumerate(program.execution_plans):
        _check_plan(plan, f"execution_plan[{i}]", len(constants) + 1,
                    {DataLocation.INLINE: len(delegate_payloads)})

    # The constant segment: the empty placeholder, then each constant, padded to the
    # tensor alignment except the last.
    blobs = [b""] + [bytes(c) for c in constants]
    offsets, chunks, at = [], [], 0
    for i, blob in enumerate(blobs):
        offsets.append(at)
        pad = _align(len(blob), tensor_alignment) - len(blob) if i < len(blobs) - 1 else 0
        chunks.append(blob + bytes(pad))
        at += len(blob) + pad
    segment_blobs = [b"".join(chunks)]

    def segment_for(blob: bytes, known: dict) -> int:
        if blob not in known:
            known[blob] = len(segment_blobs)
            segment_blobs.append(blob)
        return known[blob]

    used, inline, delegate_segments, plans = set(), [], {}, []
    for plan in program.execution_plans:
        delegates = []
        for d in plan.delegates:
            payload = bytes(delegate_payloads[d.processed.index])
            used.add(d.processed.index)
            if payload:
                ref = DataReference(DataLocation.SEGMENT, segment_for(payload, delegate_segments))
            else:
                ref = DataReference(DataLocation.INLINE, len(inline))
                inline.append(payload)
            delegates.append(BackendDelegate(d.id, ref, d.compile_specs))
        plans.append(ExecutionPlan(plan.name, plan.values, plan.inputs, plan.outputs, plan.chains,
                                   plan.operators, delegates, plan.non_const_buffer_sizes))
    unused = sorted(set(range(len(delegate_payloads))) - used)
    if unused:
        raise PteError(f"delegate_payloads {unused} are not used by any delegate")
    named_segments: dict = {}
    named = [NamedData(key, segment_for(bytes(blob), named_segments))
             for key, blob in named_data.items()]

    segments, data = [], bytearray()
    for blob in segment_blobs:
        start = _align(len(data), segment_alignment)
        data += bytes(start - len(data)) + blob
        segments.append(DataSegment(start, len(blob)))

    flat = _Writer().program(PteProgram(
        plans, program.version, backend_delegate_data=inline, segments=segments,
        constant_segment=SubsegmentOffsets(0, offsets), named_data=named))
    if not data:
        return flat
    header_length = _align(EXTENDED_HEADER_LENGTH, SCHEMA_MAX_ALIGNMENT)
    program_size = header_length + len(flat)
    base = _align(program_size, segment_alignment)
    header = ExtendedHeader(program_size, base, len(data)).encode()
    root = struct.unpack_from("<I", flat)[0] + header_length
    return b"".join([struct.pack("<I", root), flat[4:8], header.ljust(header_length, b"\0"),
                     flat[8:], bytes(base - program_size), data])


# --- Reader ---------------------------------------------------------------------------

_U8, _I8, _U16, _I32, _U32 = (struct.Struct(f) for f in ("<B", "<b", "<H", "<i", "<I"))
_I64, _U64, _F64 = (struct.Struct(f) for f in ("<q", "<Q", "<d"))


class _Reader:
    """Bounds-checked access to FlatBuffer bytes. Work is capped at a multiple of the
    size, so overlapping (aliased) vectors cannot make reading take quadratic time."""

    def __init__(self, data: bytes) -> None:
        self.data, self.size = data, len(data)
        self.budget = 8 * self.size + 4096

    def get(self, fmt: struct.Struct, pos: int, what: str):
        if pos < 0 or pos + fmt.size > self.size:
            raise PteError(f"{what}: {fmt.size} bytes at offset {pos} lie outside the "
                           f"program ({self.size} bytes)")
        return fmt.unpack_from(self.data, pos)[0]

    def spend(self, n: int, what: str) -> None:
        self.budget -= n
        if self.budget < 0:
            raise PteError(f"{what}: the program's tables and vectors overlap far more "
                           "than a valid file's can")

    def table(self, pos: int, what: str) -> "_Table":
        vtable = pos - self.get(_I32, pos, f"{what}: vtable offset")
        vt_size = self.get(_U16, vtable, f"{what}: vtable")
        obj_size = self.get(_U16, vtable + 2, f"{what}: vtable")
        if vt_size < 4 or vt_size % 2 or vtable + vt_size > self.size:
            raise PteError(f"{what}: vtable at offset {vtable} has a bad size {vt_size}")
        if obj_size < 4 or pos + obj_size > self.size:
            raise PteError(f"{what}: table at offset {pos} has a bad size {obj_size}")
        self.spend(vt_size + obj_size, what)
        return _Table(self, pos, vtable, vt_size, obj_size, what)


@dataclass
class _Table:
    r: _Reader
    pos: int
    vtable: int
    vt_size: int
    obj_size: int
    what: str

    def _field(self, slot: int, size: int, name: str) -> int | None:
        entry = 4 + 2 * slot
        if entry + 2 > self.vt_size:
            return None
        voffset = self.r.get(_U16, self.vtable + entry, f"{self.what}.{name}")
        if voffset == 0:
            return None
        # Only the start is checked against the table: writers (ExecuTorch's included)
        # record object sizes that can end before an 8-byte field does.
        if not 4 <= voffset < self.obj_size:
            raise PteError(f"{self.what}.{name}: field at offset {voffset} lies outside "
                           f"its table ({self.obj_size} bytes)")
        return self.pos + voffset

    def scalar(self, slot: int, fmt: struct.Struct, name: str, default=0):
        p = self._field(slot, fmt.size, name)
        return default if p is None else self.r.get(fmt, p, f"{self.what}.{name}")

    def _target(self, slot: int, name: str) -> int | None:
        p = self._field(slot, 4, name)
        return None if p is None else p + self.r.get(_U32, p, f"{self.what}.{name}")

    def table(self, slot: int, name: str) -> "_Table | None":
        t = self._target(slot, name)
        return None if t is None else self.r.table(t, f"{self.what}.{name}")

    def _vector(self, slot: int, elem_size: int, name: str) -> tuple[int, int, str]:
        what = f"{self.what}.{name}"
        t = self._target(slot, name)
        if t is None:
            return 0, 0, what
        count = self.r.get(_U32, t, f"{what}: length")
        if t + 4 + count * elem_size > self.r.size:
            raise PteError(f"{what}: {count} elements of {elem_size} bytes at offset {t + 4} "
                           f"run past the end of the program ({self.r.size} bytes)")
        self.r.spend(count * elem_size + 4, what)
        return t + 4, count, what

    def scalars(self, slot: int, code: str, name: str) -> tuple:
        start, count, _ = self._vector(slot, struct.calcsize(code), name)
        return struct.unpack_from(f"<{count}{code}", self.r.data, start) if count else ()

    def blob(self, slot: int, name: str) -> bytes:
        start, count, _ = self._vector(slot, 1, name)
        return bytes(self.r.data[start:start + count])

    def string(self, slot: int, name: str) -> str:
        start, count, what = self._vector(slot, 1, name)
        if not start:
            return ""
        if self.r.get(_U8, start + count, f"{what}: terminator") != 0:
            raise PteError(f"{what}: string is not NUL-terminated")
        try:
            return bytes(self.r.data[start:start + count]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise PteError(f"{what}: string is not UTF-8 ({e.reason})") from None

    def tables(self, slot: int, name: str) -> list["_Table"]:
        start, count, what = self._vector(slot, 4, name)
        return [self.r.table(p + self.r.get(_U32, p, f"{what}[{i}]"), f"{what}[{i}]")
                for i, p in enumerate(range(start, start + 4 * count, 4))]

    def union(self, slot: int, name: str, codes: type[IntEnum]) -> tuple[IntEnum, "_Table"]:
        code = self.scalar(slot, _U8, f"{name}_type")
        if code not in codes._value2member_map_ or code == 0:
            raise PteError(f"{self.what}.{name}_type is {code}, not a {codes.__name__} type")
        value = self.table(slot + 1, name)
        if value is None:
            raise PteError(f"{self.what}.{name} is missing (type {codes(code).name})")
        return codes(code), value


def _enum(enum: type[IntEnum], value: int, what: str) -> IntEnum:
    if value not in enum._value2member_map_:
        raise PteError(f"{what} is {value}, not a {enum.__name__}")
    return enum(value)


def _read_tensor(t: _Table) -> Tensor:
    if t.table(_Tensor.extra_tensor_info, "extra_tensor_info") is not None:
        raise PteError(f"{t.what}.extra_tensor_info is set (external or mutable tensor "
                       "data): not supported")
    alloc = t.table(_Tensor.allocation_info, "allocation_info")
    return Tensor(
        scalar_type=_enum(ScalarType, t.scalar(_Tensor.scalar_type, _I8, "scalar_type"),
                          f"{t.what}.scalar_type"),
        storage_offset=t.scalar(_Tensor.storage_offset, _I32, "storage_offset"),
        sizes=t.scalars(_Tensor.sizes, "i", "sizes"),
        dim_order=t.scalars(_Tensor.dim_order, "B", "dim_order"),
        requires_grad=bool(t.scalar(_Tensor.requires_grad, _U8, "requires_grad")),
        data_buffer_idx=t.scalar(_Tensor.data_buffer_idx, _U32, "data_buffer_idx"),
        allocation_info=None if alloc is None else AllocationInfo(
            alloc.scalar(0, _U32, "memory_id"), alloc.scalar(1, _U32, "memory_offset_low"),
            alloc.scalar(2, _U32, "memory_offset_high")),
        layout=t.scalar(_Tensor.layout, _I8, "layout"),
        shape_dynamism=_enum(TensorShapeDynamism,
                             t.scalar(_Tensor.shape_dynamism, _I8, "shape_dynamism"),
                             f"{t.what}.shape_dynamism"))


def _read_evalue(t: _Table) -> EValue:
    code, v = t.union(0, "val", KernelTypes)
    if code == KernelTypes.Null:
        return Null()
    if code == KernelTypes.Tensor:
        return _read_tensor(v)
    if code == KernelTypes.Int:
        return Int(v.scalar(0, _I64, "int_val"))
    if code == KernelTypes.Bool:
        return Bool(bool(v.scalar(0, _U8, "bool_val")))
    if code == KernelTypes.Double:
        return Double(v.scalar(0, _F64, "double_val", 0.0))
    if code == KernelTypes.String:
        return String(v.string(0, "string_val"))
    kind, fmt = {KernelTypes.IntList: (IntList, "q"), KernelTypes.DoubleList: (DoubleList, "d"),
                 KernelTypes.BoolList: (BoolList, "B"), KernelTypes.TensorList: (TensorList, "i"),
                 KernelTypes.OptionalTensorList: (OptionalTensorList, "i")}[code]
    items = v.scalars(0, fmt, "items")
    return kind(tuple(map(bool, items)) if kind is BoolList else items)


def _read_instruction(t: _Table) -> Instruction:
    code, v = t.union(0, "instr_args", InstructionArguments)
    if code == InstructionArguments.KernelCall:
        return KernelCall(v.scalar(0, _I32, "op_index"), v.scalars(1, "i", "args"))
    if code == InstructionArguments.DelegateCall:
        return DelegateCall(v.scalar(0, _I32, "delegate_index"), v.scalars(1, "i", "args"))
    if code == InstructionArguments.MoveCall:
        return MoveCall(v.scalar(0, _I32, "move_from"), v.scalar(1, _I32, "move_to"))
    if code == InstructionArguments.JumpFalseCall:
        return JumpFalseCall(v.scalar(0, _I32, "cond_value_index"),
                             v.scalar(1, _I32, "destination_instruction"))
    return FreeCall(v.scalar(0, _I32, "value_index"))


def _read_chain(t: _Table) -> Chain:
    stacktrace = None
    if t._target(_Chain.stacktrace, "stacktrace") is not None:
        stacktrace = [[Frame(f.string(_Frame.filename, "filename"),
                             f.scalar(_Frame.lineno, _I32, "lineno"),
                             f.string(_Frame.name, "name"), f.string(_Frame.context, "context"))
                       for f in frames.tables(0, "items")]
                      for frames in t.tables(_Chain.stacktrace, "stacktrace")]
    return Chain(t.scalars(_Chain.inputs, "i", "inputs"), t.scalars(_Chain.outputs, "i", "outputs"),
                 [_read_instruction(i) for i in t.tables(_Chain.instructions, "instructions")],
                 stacktrace)


def _read_delegate(t: _Table) -> BackendDelegate:
    ref = t.table(_Delegate.processed, "processed")
    if ref is None:
        raise PteError(f"{t.what}.processed is missing")
    location = _enum(DataLocation, ref.scalar(0, _I8, "location"), f"{ref.what}.location")
    return BackendDelegate(
        t.string(_Delegate.id, "id"), DataReference(location, ref.scalar(1, _U32, "index")),
        [DelegateCompileSpec(s.string(0, "key"), s.blob(1, "value"))
         for s in t.tables(_Delegate.compile_specs, "compile_specs")])


def _read_plan(t: _Table) -> ExecutionPlan:
    if t.tables(_Plan.non_const_buffer_device, "non_const_buffer_device"):
        raise PteError(f"{t.what}.non_const_buffer_device is set (buffers on another device): "
                       "not supported")
    return ExecutionPlan(
        name=t.string(_Plan.name, "name"),
        values=[_read_evalue(v) for v in t.tables(_Plan.values, "values")],
        inputs=t.scalars(_Plan.inputs, "i", "inputs"),
        outputs=t.scalars(_Plan.outputs, "i", "outputs"),
        chains=[_read_chain(c) for c in t.tables(_Plan.chains, "chains")],
        operators=[Operator(o.string(0, "name"), o.string(1, "overload"))
                   for o in t.tables(_Plan.operators, "operators")],
        delegates=[_read_delegate(d) for d in t.tables(_Plan.delegates, "delegates")],
        non_const_buffer_sizes=t.scalars(_Plan.non_const_buffer_sizes, "q",
                                         "non_const_buffer_sizes"))


def _read_program(t: _Table) -> PteProgram:
    if t.tables(_Program.mutable_data_segments, "mutable_data_segments"):
        raise PteError("Program.mutable_data_segments is set (mutable tensors with initial "
                       "state): not supported")
    cs = t.table(_Program.constant_segment, "constant_segment")
    return PteProgram(
        version=t.scalar(_Program.version, _U32, "version"),
        execution_plans=[_read_plan(p) for p in t.tables(_Program.execution_plan, "execution_plan")],
        constant_buffers=[b.blob(0, "storage") for b in t.tables(_Program.constant_buffer,
                                                                 "constant_buffer")],
        backend_delegate_data=[d.blob(0, "data") for d in t.tables(_Program.backend_delegate_data,
                                                                   "backend_delegate_data")],
        segments=[DataSegment(s.scalar(0, _U64, "offset"), s.scalar(1, _U64, "size"))
                  for s in t.tables(_Program.segments, "segments")],
        constant_segment=None if cs is None else SubsegmentOffsets(
            cs.scalar(0, _U32, "segment_index"), cs.scalars(1, "Q", "offsets")),
        named_data=[NamedData(n.string(0, "key"), n.scalar(1, _U32, "segment_index"))
                    for n in t.tables(_Program.named_data, "named_data")])


def _read_header(data: bytes) -> ExtendedHeader | None:
    at = EXTENDED_HEADER_OFFSET
    if data[at:at + 4] != EXTENDED_HEADER_MAGIC:
        return None
    if len(data) < at + EXTENDED_HEADER_MIN_LENGTH:
        raise PteError(f"extended header is cut off: the file has {len(data)} bytes")
    length, program_size, base = struct.unpack_from("<IQQ", data, at + 4)
    if not EXTENDED_HEADER_MIN_LENGTH <= length <= EXTENDED_HEADER_HEAD_BYTES - at:
        raise PteError(f"extended header length is {length}, expected "
                       f"{EXTENDED_HEADER_MIN_LENGTH}..{EXTENDED_HEADER_HEAD_BYTES - at}")
    if len(data) < at + length:
        raise PteError(f"extended header ({length} bytes) is cut off: the file has {len(data)} bytes")
    size = struct.unpack_from("<Q", data, at + 24)[0] if length >= 32 else None
    if not at + length <= program_size <= len(data):
        raise PteError(f"extended header says program_size {program_size}, but the file has "
                       f"{len(data)} bytes (truncated?)")
    if base and not program_size <= base <= len(data):
        raise PteError(f"extended header says segment_base_offset {base}, outside "
                       f"{program_size}..{len(data)} (truncated?)")
    if size and not base:
        raise PteError(f"extended header says {size} bytes of segment data but no "
                       "segment_base_offset")
    if size is not None and base + size > len(data):
        raise PteError(f"extended header says {size} bytes of segment data from offset "
                       f"{base}, but the file has {len(data)} bytes (truncated?)")
    return ExtendedHeader(program_size, base, size, length)


@dataclass(frozen=True)
class PteFile:
    """A deserialized .pte: the program as stored, plus access to the data it refers to.
    Every reference was checked by `deserialize`, so the accessors below cannot overrun."""

    program: PteProgram
    header: ExtendedHeader | None
    data: bytes = field(repr=False)
    segment_data_start: int  # file offset where segment offsets count from
    segment_data_end: int

    def segment(self, index: int) -> bytes:
        s = self.program.segments[index]
        start = self.segment_data_start + s.offset
        return self.data[start:start + s.size]

    def constant(self, index: int) -> bytes:
        """Constant `index` (1-based, as data_buffer_idx) up to the next one, padding included."""
        cs = self.program.constant_segment
        if cs is not None and cs.offsets:
            seg = self.segment(cs.segment_index)
            end = cs.offsets[index + 1] if index + 1 < len(cs.offsets) else len(seg)
            return seg[cs.offsets[index]:end]
        return self.program.constant_buffers[index]

    def tensor_data(self, tensor: Tensor) -> bytes | None:
        """A constant tensor's bytes (exactly nbytes), or None for a tensor without data."""
        if not tensor.data_buffer_idx:
            return None
        return self.constant(tensor.data_buffer_idx)[:tensor.nbytes]

    def delegate_payload(self, delegate: BackendDelegate) -> bytes:
        ref = delegate.processed
        if ref.location == DataLocation.SEGMENT:
            return self.segment(ref.index)
        return self.program.backend_delegate_data[ref.index]

    def named(self) -> dict[str, bytes]:
        return {n.key: self.segment(n.segment_index) for n in self.program.named_data}

    def forward(self) -> ExecutionPlan:
        """The plan kiln's runner and `kiln run-host` run: the first, every input and output
        of it a Tensor without constant data. Raises PteError otherwise."""
        if not self.program.execution_plans:
            raise PteError("the program has no execution plan")
        plan = self.program.execution_plans[0]
        for name in ("inputs", "outputs"):
            for j, index in enumerate(getattr(plan, name)):
                value = plan.values[index]
                if not isinstance(value, Tensor):
                    raise PteError(f"execution_plan[0].{name}[{j}] is value {index}, a {type(value).__name__}; "
                                   "kiln runs programs whose inputs and outputs are tensors")
                if value.data_buffer_idx:
                    raise PteError(f"execution_plan[0].{name}[{j}] is value {index}, a constant tensor")
        return plan


def deserialize(data: bytes) -> PteFile:
    """Reads a .pte file written by kiln or by ExecuTorch 1.5.1.

    Raises PteError, naming the field, for any malformed or unsupported content: a bad
    identifier or header, offsets outside the file, unknown union or enum codes, indices
    that refer to nothing, constants or segments outside the data."""
    data = bytes(data)
    if len(data) < 8:
        raise PteError(f"not an ExecuTorch program: {len(data)} bytes is too short")
    if data[4:8] != FILE_IDENTIFIER:
        raise PteError(f"not an ExecuTorch program: file identifier is {data[4:8]!r}, "
                       f"expected {FILE_IDENTIFIER!r}")
    header = _read_header(data)
    program_size = header.program_size if header else len(data)
    reader = _Reader(memoryview(data)[:program_size])
    program = _read_program(reader.table(reader.get(_U32, 0, "root offset"), "Program"))

    # Segment data: from segment_base_offset to its end (or the file's, for the older
    # 24-byte header); without a segment_base_offset there is none.
    if header and header.segment_base_offset:
        start = header.segment_base_offset
        end = len(data) if header.segment_data_size is None else start + header.segment_data_size
    else:
        start = end = len(data)
    for i, s in enumerate(program.segments):
        if start + s.offset + s.size > end:
            raise PteError(f"segments[{i}] (offset {s.offset}, size {s.size}) runs past the "
                           f"segment data ({end - start} bytes from file offset {start})")
    cs = program.constant_segment
    if cs is not None and cs.offsets:
        if program.constant_buffers:
            raise PteError("both constant_buffer and constant_segment hold constants")
        _check_index(cs.segment_index, len(program.segments), "constant_segment.segment_index")
        seg_size = program.segments[cs.segment_index].size
        if any(b < a for a, b in zip(cs.offsets, cs.offsets[1:])) or cs.offsets[-1] > seg_size:
            raise PteError(f"constant_segment.offsets {list(cs.offsets)[:8]}... are not "
                           f"ascending within the segment ({seg_size} bytes)")
        n_constants = len(cs.offsets)
    else:
        n_constants = len(program.constant_buffers)
    for i, n in enumerate(program.named_data):
        _check_index(n.segment_index, len(program.segments), f"named_data[{i}].segment_index")
    pte = PteFile(program, header, data, start, end)
    targets = {DataLocation.INLINE: len(program.backend_delegate_data),
               DataLocation.SEGMENT: len(program.segments)}
    for i, plan in enumerate(program.execution_plans):
        _check_plan(plan, f"execution_plan[{i}]", n_constants, targets)
        for j, v in enumerate(plan.values):
            if isinstance(v, Tensor) and v.data_buffer_idx:
                have = len(pte.constant(v.data_buffer_idx))
                if v.nbytes > have:
                    raise PteError(f"execution_plan[{i}].values[{j}] needs {v.nbytes} bytes of "
                                   f"constant {v.data_buffer_idx}, which holds {have}")
    return pte


def without_reference_data(f: PteFile) -> bytes:
    """The .pte `f` without the named data only run-host reads (TOSA_KEY's graphs); `f.data`
    itself when it has none. The program, its constants, delegate payloads and other named
    data are written back unchanged in `serialize`'s layout (ExecuTorch's), the one kiln
    compile wrote them in."""
    prefix = TOSA_KEY.format("")
    named = f.named()
    kept = {key: blob for key, blob in named.items() if not key.startswith(prefix)}
    if len(kept) == len(named):
        return f.data
    payloads, plans = [], []
    for plan in f.program.execution_plans:
        delegates = []
        for d in plan.delegates:
            delegates.append(BackendDelegate(d.id, DataReference(DataLocation.INLINE, len(payloads)), d.compile_specs))
            payloads.append(f.delegate_payload(d))
        plans.append(replace(plan, delegates=delegates))
    cs = f.program.constant_segment
    n_constants = len(cs.offsets) if cs is not None and cs.offsets else len(f.program.constant_buffers)
    constants = [f.constant(i) for i in range(1, n_constants)]  # 0: the reserved empty one
    return serialize(PteProgram(plans, f.program.version), constants=constants, delegate_payloads=payloads,
                     named_data=kept)
