"""Reads a .pte (kiln's or ExecuTorch 1.5.1's) into a PteFile, checking every offset, size and
cross-reference; anything malformed or unsupported is a PteError naming the field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from kiln.errors import PteError
from kiln.pte.schema import (
    EXTENDED_HEADER_HEAD_BYTES,
    EXTENDED_HEADER_MAGIC,
    EXTENDED_HEADER_MIN_LENGTH,
    EXTENDED_HEADER_OFFSET,
    FILE_IDENTIFIER,
    AllocationInfo,
    BackendDelegate,
    Bool,
    BoolList,
    Chain,
    ChainSlot,
    DataLocation,
    DataReference,
    DataSegment,
    DelegateCall,
    DelegateCompileSpec,
    DelegateSlot,
    Double,
    DoubleList,
    EValue,
    ExecutionPlan,
    ExtendedHeader,
    ExtraTensorInfoSlot,
    Frame,
    FrameSlot,
    FreeCall,
    Instruction,
    InstructionArguments,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    KernelTypes,
    MoveCall,
    NamedData,
    Null,
    Operator,
    OptionalTensorList,
    PlanSlot,
    ProgramSlot,
    PteProgram,
    ScalarType,
    String,
    SubsegmentOffsets,
    Tensor,
    TensorList,
    TensorShapeDynamism,
    TensorSlot,
)
from kiln.pte.validate import check_index, check_plan, check_state

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
            raise PteError(f"{what}: {fmt.size} bytes at offset {pos} lie outside the program ({self.size} bytes)")
        return fmt.unpack_from(self.data, pos)[0]

    def spend(self, n: int, what: str) -> None:
        self.budget -= n
        if self.budget < 0:
            raise PteError(f"{what}: the program's tables and vectors overlap far more than a valid file's can")

    def table(self, pos: int, what: str) -> _Table:
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
            raise PteError(
                f"{self.what}.{name}: field at offset {voffset} lies outside its table ({self.obj_size} bytes)"
            )
        return self.pos + voffset

    def scalar(self, slot: int, fmt: struct.Struct, name: str, default=0):
        p = self._field(slot, fmt.size, name)
        return default if p is None else self.r.get(fmt, p, f"{self.what}.{name}")

    def _target(self, slot: int, name: str) -> int | None:
        p = self._field(slot, 4, name)
        return None if p is None else p + self.r.get(_U32, p, f"{self.what}.{name}")

    def table(self, slot: int, name: str) -> _Table | None:
        t = self._target(slot, name)
        return None if t is None else self.r.table(t, f"{self.what}.{name}")

    def _vector(self, slot: int, elem_size: int, name: str) -> tuple[int, int, str]:
        what = f"{self.what}.{name}"
        t = self._target(slot, name)
        if t is None:
            return 0, 0, what
        count = self.r.get(_U32, t, f"{what}: length")
        if t + 4 + count * elem_size > self.r.size:
            raise PteError(
                f"{what}: {count} elements of {elem_size} bytes at offset {t + 4} "
                f"run past the end of the program ({self.r.size} bytes)"
            )
        self.r.spend(count * elem_size + 4, what)
        return t + 4, count, what

    def scalars(self, slot: int, code: str, name: str) -> tuple:
        start, count, _ = self._vector(slot, struct.calcsize(code), name)
        return struct.unpack_from(f"<{count}{code}", self.r.data, start) if count else ()

    def blob(self, slot: int, name: str) -> bytes:
        start, count, _ = self._vector(slot, 1, name)
        return bytes(self.r.data[start : start + count])

    def string(self, slot: int, name: str) -> str:
        start, count, what = self._vector(slot, 1, name)
        if not start:
            return ""
        if self.r.get(_U8, start + count, f"{what}: terminator") != 0:
            raise PteError(f"{what}: string is not NUL-terminated")
        try:
            return bytes(self.r.data[start : start + count]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise PteError(f"{what}: string is not UTF-8 ({e.reason})") from None

    def tables(self, slot: int, name: str) -> list[_Table]:
        start, count, what = self._vector(slot, 4, name)
        return [
            self.r.table(p + self.r.get(_U32, p, f"{what}[{i}]"), f"{what}[{i}]")
            for i, p in enumerate(range(start, start + 4 * count, 4))
        ]

    def union(self, slot: int, name: str, codes: type[IntEnum]) -> tuple[IntEnum, _Table]:
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


def _tensor_name(t: _Table) -> str | None:
    """extra_tensor_info.fully_qualified_name; PteError for what else the table may say (data
    outside the file, in a mutable data segment, or on a device other than the CPU), which kiln
    does not read."""
    extra = t.table(TensorSlot.extra_tensor_info, "extra_tensor_info")
    if extra is None:
        return None
    segment = extra.scalar(ExtraTensorInfoSlot.mutable_data_segments_idx, _U64, "mutable_data_segments_idx")
    location = extra.scalar(ExtraTensorInfoSlot.location, _I8, "location")
    if segment or location:
        raise PteError(
            f"{t.what}.extra_tensor_info places the tensor's data in a mutable data segment or outside the "
            "file: not supported"
        )
    device = extra.scalar(ExtraTensorInfoSlot.device_type, _I8, "device_type")
    if device:
        raise PteError(f"{t.what}.extra_tensor_info places the tensor on device type {device}, not the CPU (0)")
    return extra.string(ExtraTensorInfoSlot.fully_qualified_name, "fully_qualified_name") or None


def _read_tensor(t: _Table) -> Tensor:
    alloc = t.table(TensorSlot.allocation_info, "allocation_info")
    return Tensor(
        scalar_type=_enum(ScalarType, t.scalar(TensorSlot.scalar_type, _I8, "scalar_type"), f"{t.what}.scalar_type"),
        storage_offset=t.scalar(TensorSlot.storage_offset, _I32, "storage_offset"),
        sizes=t.scalars(TensorSlot.sizes, "i", "sizes"),
        dim_order=t.scalars(TensorSlot.dim_order, "B", "dim_order"),
        requires_grad=bool(t.scalar(TensorSlot.requires_grad, _U8, "requires_grad")),
        data_buffer_idx=t.scalar(TensorSlot.data_buffer_idx, _U32, "data_buffer_idx"),
        allocation_info=None
        if alloc is None
        else AllocationInfo(
            alloc.scalar(0, _U32, "memory_id"),
            alloc.scalar(1, _U32, "memory_offset_low"),
            alloc.scalar(2, _U32, "memory_offset_high"),
        ),
        layout=t.scalar(TensorSlot.layout, _I8, "layout"),
        shape_dynamism=_enum(
            TensorShapeDynamism, t.scalar(TensorSlot.shape_dynamism, _I8, "shape_dynamism"), f"{t.what}.shape_dynamism"
        ),
        name=_tensor_name(t),
    )


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
    kind, fmt = {
        KernelTypes.IntList: (IntList, "q"),
        KernelTypes.DoubleList: (DoubleList, "d"),
        KernelTypes.BoolList: (BoolList, "B"),
        KernelTypes.TensorList: (TensorList, "i"),
        KernelTypes.OptionalTensorList: (OptionalTensorList, "i"),
    }[code]
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
        return JumpFalseCall(v.scalar(0, _I32, "cond_value_index"), v.scalar(1, _I32, "destination_instruction"))
    return FreeCall(v.scalar(0, _I32, "value_index"))


def _read_chain(t: _Table) -> Chain:
    stacktrace = None
    if t._target(ChainSlot.stacktrace, "stacktrace") is not None:
        stacktrace = [
            [
                Frame(
                    f.string(FrameSlot.filename, "filename"),
                    f.scalar(FrameSlot.lineno, _I32, "lineno"),
                    f.string(FrameSlot.name, "name"),
                    f.string(FrameSlot.context, "context"),
                )
                for f in frames.tables(0, "items")
            ]
            for frames in t.tables(ChainSlot.stacktrace, "stacktrace")
        ]
    return Chain(
        t.scalars(ChainSlot.inputs, "i", "inputs"),
        t.scalars(ChainSlot.outputs, "i", "outputs"),
        [_read_instruction(i) for i in t.tables(ChainSlot.instructions, "instructions")],
        stacktrace,
    )


def _read_delegate(t: _Table) -> BackendDelegate:
    ref = t.table(DelegateSlot.processed, "processed")
    if ref is None:
        raise PteError(f"{t.what}.processed is missing")
    location = _enum(DataLocation, ref.scalar(0, _I8, "location"), f"{ref.what}.location")
    return BackendDelegate(
        t.string(DelegateSlot.id, "id"),
        DataReference(location, ref.scalar(1, _U32, "index")),
        [
            DelegateCompileSpec(s.string(0, "key"), s.blob(1, "value"))
            for s in t.tables(DelegateSlot.compile_specs, "compile_specs")
        ],
    )


def _read_plan(t: _Table) -> ExecutionPlan:
    if t.tables(PlanSlot.non_const_buffer_device, "non_const_buffer_device"):
        raise PteError(f"{t.what}.non_const_buffer_device is set (buffers on another device): not supported")
    return ExecutionPlan(
        name=t.string(PlanSlot.name, "name"),
        values=[_read_evalue(v) for v in t.tables(PlanSlot.values, "values")],
        inputs=t.scalars(PlanSlot.inputs, "i", "inputs"),
        outputs=t.scalars(PlanSlot.outputs, "i", "outputs"),
        chains=[_read_chain(c) for c in t.tables(PlanSlot.chains, "chains")],
        operators=[
            Operator(o.string(0, "name"), o.string(1, "overload")) for o in t.tables(PlanSlot.operators, "operators")
        ],
        delegates=[_read_delegate(d) for d in t.tables(PlanSlot.delegates, "delegates")],
        non_const_buffer_sizes=t.scalars(PlanSlot.non_const_buffer_sizes, "q", "non_const_buffer_sizes"),
    )


def _read_program(t: _Table) -> PteProgram:
    if t.tables(ProgramSlot.mutable_data_segments, "mutable_data_segments"):
        raise PteError("Program.mutable_data_segments is set (mutable tensors with initial state): not supported")
    cs = t.table(ProgramSlot.constant_segment, "constant_segment")
    return PteProgram(
        version=t.scalar(ProgramSlot.version, _U32, "version"),
        execution_plans=[_read_plan(p) for p in t.tables(ProgramSlot.execution_plan, "execution_plan")],
        constant_buffers=[b.blob(0, "storage") for b in t.tables(ProgramSlot.constant_buffer, "constant_buffer")],
        backend_delegate_data=[
            d.blob(0, "data") for d in t.tables(ProgramSlot.backend_delegate_data, "backend_delegate_data")
        ],
        segments=[
            DataSegment(s.scalar(0, _U64, "offset"), s.scalar(1, _U64, "size"))
            for s in t.tables(ProgramSlot.segments, "segments")
        ],
        constant_segment=None
        if cs is None
        else SubsegmentOffsets(cs.scalar(0, _U32, "segment_index"), cs.scalars(1, "Q", "offsets")),
        named_data=[
            NamedData(n.string(0, "key"), n.scalar(1, _U32, "segment_index"))
            for n in t.tables(ProgramSlot.named_data, "named_data")
        ],
    )


def _read_header(data: bytes) -> ExtendedHeader | None:
    at = EXTENDED_HEADER_OFFSET
    if data[at : at + 4] != EXTENDED_HEADER_MAGIC:
        return None
    if len(data) < at + EXTENDED_HEADER_MIN_LENGTH:
        raise PteError(f"extended header is cut off: the file has {len(data)} bytes")
    length, program_size, base = struct.unpack_from("<IQQ", data, at + 4)
    if not EXTENDED_HEADER_MIN_LENGTH <= length <= EXTENDED_HEADER_HEAD_BYTES - at:
        raise PteError(
            f"extended header length is {length}, expected "
            f"{EXTENDED_HEADER_MIN_LENGTH}..{EXTENDED_HEADER_HEAD_BYTES - at}"
        )
    if len(data) < at + length:
        raise PteError(f"extended header ({length} bytes) is cut off: the file has {len(data)} bytes")
    size = struct.unpack_from("<Q", data, at + 24)[0] if length >= 32 else None
    if not at + length <= program_size <= len(data):
        raise PteError(
            f"extended header says program_size {program_size}, but the file has {len(data)} bytes (truncated?)"
        )
    if base and not program_size <= base <= len(data):
        raise PteError(
            f"extended header says segment_base_offset {base}, outside {program_size}..{len(data)} (truncated?)"
        )
    if size and not base:
        raise PteError(f"extended header says {size} bytes of segment data but no segment_base_offset")
    if size is not None and base + size > len(data):
        raise PteError(
            f"extended header says {size} bytes of segment data from offset "
            f"{base}, but the file has {len(data)} bytes (truncated?)"
        )
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
        return self.data[start : start + s.size]

    def constant(self, index: int) -> bytes:
        """Constant `index` (1-based, as data_buffer_idx) up to the next one, padding included."""
        cs = self.program.constant_segment
        if cs is not None and cs.offsets:
            seg = self.segment(cs.segment_index)
            end = cs.offsets[index + 1] if index + 1 < len(cs.offsets) else len(seg)
            return seg[cs.offsets[index] : end]
        return self.program.constant_buffers[index]

    def tensor_data(self, tensor: Tensor) -> bytes | None:
        """A constant tensor's bytes (exactly nbytes), or None for a tensor without data."""
        if not tensor.data_buffer_idx:
            return None
        return self.constant(tensor.data_buffer_idx)[: tensor.nbytes]

    def delegate_payload(self, delegate: BackendDelegate) -> bytes:
        ref = delegate.processed
        if ref.location == DataLocation.SEGMENT:
            return self.segment(ref.index)
        return self.program.backend_delegate_data[ref.index]

    def named(self) -> dict[str, bytes]:
        return {n.key: self.segment(n.segment_index) for n in self.program.named_data}

    def forward(self) -> ExecutionPlan:
        """The plan kiln's runner and `kiln run-host` run by default: the first, every input and
        output of it a Tensor without constant data. Raises PteError otherwise."""
        if not self.program.execution_plans:
            raise PteError("the program has no execution plan")
        return self.method(self.program.execution_plans[0].name)

    def methods(self) -> list[str]:
        """The names of the program's plans, in order."""
        return [plan.name for plan in self.program.execution_plans]

    def method(self, name: str) -> ExecutionPlan:
        """The plan named `name`, every input and output of it a Tensor without constant data.
        Raises PteError for a plan that is not there or not so."""
        index = next((i for i, plan in enumerate(self.program.execution_plans) if plan.name == name), None)
        if index is None:
            raise PteError(f"the program has no method {name!r} (it has {', '.join(map(repr, self.methods()))})")
        plan = self.program.execution_plans[index]
        for side in ("inputs", "outputs"):
            for j, value_index in enumerate(getattr(plan, side)):
                value = plan.values[value_index]
                if not isinstance(value, Tensor):
                    raise PteError(
                        f"execution_plan[{index}].{side}[{j}] is value {value_index}, a {type(value).__name__}; "
                        "kiln runs programs whose inputs and outputs are tensors"
                    )
                if value.data_buffer_idx:
                    raise PteError(f"execution_plan[{index}].{side}[{j}] is value {value_index}, a constant tensor")
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
        raise PteError(f"not an ExecuTorch program: file identifier is {data[4:8]!r}, expected {FILE_IDENTIFIER!r}")
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
            raise PteError(
                f"segments[{i}] (offset {s.offset}, size {s.size}) runs past the "
                f"segment data ({end - start} bytes from file offset {start})"
            )
    cs = program.constant_segment
    if cs is not None and cs.offsets:
        if program.constant_buffers:
            raise PteError("both constant_buffer and constant_segment hold constants")
        check_index(cs.segment_index, len(program.segments), "constant_segment.segment_index")
        seg_size = program.segments[cs.segment_index].size
        if any(b < a for a, b in zip(cs.offsets, cs.offsets[1:])) or cs.offsets[-1] > seg_size:
            raise PteError(
                f"constant_segment.offsets {list(cs.offsets)[:8]}... are not "
                f"ascending within the segment ({seg_size} bytes)"
            )
        n_constants = len(cs.offsets)
    else:
        n_constants = len(program.constant_buffers)
    for i, n in enumerate(program.named_data):
        check_index(n.segment_index, len(program.segments), f"named_data[{i}].segment_index")
    pte = PteFile(program, header, data, start, end)
    targets = {DataLocation.INLINE: len(program.backend_delegate_data), DataLocation.SEGMENT: len(program.segments)}
    for i, plan in enumerate(program.execution_plans):
        check_plan(plan, f"execution_plan[{i}]", n_constants, targets)
    check_state(program.execution_plans)
    for i, plan in enumerate(program.execution_plans):
        for j, v in enumerate(plan.values):
            if isinstance(v, Tensor) and v.data_buffer_idx:
                have = len(pte.constant(v.data_buffer_idx))
                if v.nbytes > have:
                    raise PteError(
                        f"execution_plan[{i}].values[{j}] needs {v.nbytes} bytes of "
                        f"constant {v.data_buffer_idx}, which holds {have}"
                    )
    return pte
