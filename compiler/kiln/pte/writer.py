"""Writes a PteProgram as .pte bytes in ExecuTorch 1.5.1's layout (kiln.pte.schema describes it),
and rewrites a read .pte without kiln's reference data.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import replace

import flatbuffers

from kiln.errors import PteError
from kiln.pte.reader import PteFile
from kiln.pte.schema import (
    EXTENDED_HEADER_LENGTH,
    FILE_IDENTIFIER,
    SCHEMA_MAX_ALIGNMENT,
    SEGMENT_ALIGNMENT,
    TENSOR_ALIGNMENT,
    TOSA_KEY,
    BackendDelegate,
    Bool,
    BoolList,
    Chain,
    ChainSlot,
    DataLocation,
    DataReference,
    DataSegment,
    DelegateCall,
    DelegateSlot,
    Double,
    DoubleList,
    EValue,
    ExecutionPlan,
    ExtendedHeader,
    ExtraTensorInfoSlot,
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
    OptionalTensorList,
    PlanSlot,
    ProgramSlot,
    PteProgram,
    String,
    SubsegmentOffsets,
    Tensor,
    TensorList,
    TensorSlot,
)
from kiln.pte.validate import check_plan, check_state

# The union type code of each value and instruction dataclass.
_EVALUE_CODE = {
    Null: KernelTypes.Null,
    Int: KernelTypes.Int,
    Bool: KernelTypes.Bool,
    Double: KernelTypes.Double,
    Tensor: KernelTypes.Tensor,
    String: KernelTypes.String,
    IntList: KernelTypes.IntList,
    DoubleList: KernelTypes.DoubleList,
    BoolList: KernelTypes.BoolList,
    TensorList: KernelTypes.TensorList,
    OptionalTensorList: KernelTypes.OptionalTensorList,
}
_INSTRUCTION_CODE = {
    KernelCall: InstructionArguments.KernelCall,
    DelegateCall: InstructionArguments.DelegateCall,
    MoveCall: InstructionArguments.MoveCall,
    JumpFalseCall: InstructionArguments.JumpFalseCall,
    FreeCall: InstructionArguments.FreeCall,
}


# kind -> (struct code, size, Builder slot method, smallest, largest)
_SCALAR = {
    "bool": ("B", 1, "PrependBoolSlot", 0, 1),
    "i8": ("b", 1, "PrependInt8Slot", -(2**7), 2**7 - 1),
    "u8": ("B", 1, "PrependUint8Slot", 0, 2**8 - 1),
    "i32": ("i", 4, "PrependInt32Slot", -(2**31), 2**31 - 1),
    "u32": ("I", 4, "PrependUint32Slot", 0, 2**32 - 1),
    "i64": ("q", 8, "PrependInt64Slot", -(2**63), 2**63 - 1),
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
        b.Bytes[b.Head() : b.Head() + len(raw)] = raw
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
            alloc = self.table(
                3,
                [(0, "u32", a.memory_id), (1, "u32", a.memory_offset_low), (2, "u32", a.memory_offset_high)],
                f"{at}.allocation_info",
            )
        extra = 0
        if t.name is not None:
            name = self.string(t.name)
            extra = self.table(len(ExtraTensorInfoSlot), [(ExtraTensorInfoSlot.fully_qualified_name, "off", name)], at)
        return self.table(
            len(TensorSlot),
            [
                (TensorSlot.scalar_type, "i8", int(t.scalar_type)),
                (TensorSlot.storage_offset, "i32", t.storage_offset),
                (TensorSlot.sizes, "off", sizes),
                (TensorSlot.dim_order, "off", dim_order),
                (TensorSlot.requires_grad, "bool", bool(t.requires_grad)),
                (TensorSlot.data_buffer_idx, "u32", t.data_buffer_idx),
                (TensorSlot.allocation_info, "off", alloc),
                (TensorSlot.layout, "i8", t.layout),
                (TensorSlot.shape_dynamism, "i8", int(t.shape_dynamism)),
                (TensorSlot.extra_tensor_info, "off", extra),
            ],
            at,
        )

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
            kind = {IntList: "i64", DoubleList: "f64", BoolList: "bool", TensorList: "i32", OptionalTensorList: "i32"}[
                type(v)
            ]
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
            val = self.table(2, [(0, "i32", ins.cond_value_index), (1, "i32", ins.destination_instruction)], at)
        else:
            val = self.table(1, [(0, "i32", ins.value_index)], at)
        return self.table(2, [(0, "u8", int(_INSTRUCTION_CODE[type(ins)])), (1, "off", val)], at)

    def chain(self, c: Chain, at: str) -> int:
        inputs = self.scalars("i32", c.inputs, f"{at}.inputs")
        outputs = self.scalars("i32", c.outputs, f"{at}.outputs")
        instructions = self.tables(
            [self.instruction(ins, f"{at}.instructions[{k}]") for k, ins in enumerate(c.instructions)]
        )
        stacktrace = 0
        if c.stacktrace is not None:
            lists = []
            for k, frames in enumerate(c.stacktrace):
                offs = [
                    self.table(
                        len(FrameSlot),
                        [
                            (FrameSlot.filename, "off", self.string(f.filename)),
                            (FrameSlot.lineno, "i32", f.lineno),
                            (FrameSlot.name, "off", self.string(f.name)),
                            (FrameSlot.context, "off", self.string(f.context)),
                        ],
                        f"{at}.stacktrace[{k}]",
                    )
                    for f in frames
                ]
                lists.append(self.table(1, [(0, "off", self.tables(offs))], f"{at}.stacktrace"))
            stacktrace = self.tables(lists)
        return self.table(
            len(ChainSlot),
            [
                (ChainSlot.inputs, "off", inputs),
                (ChainSlot.outputs, "off", outputs),
                (ChainSlot.instructions, "off", instructions),
                (ChainSlot.stacktrace, "off", stacktrace),
            ],
            at,
        )

    def delegate(self, d: BackendDelegate, at: str) -> int:
        id_ = self.string(d.id)
        processed = self.table(
            2, [(0, "i8", int(d.processed.location)), (1, "u32", d.processed.index)], f"{at}.processed"
        )
        specs = self.tables(
            [
                self.table(2, [(0, "off", self.string(s.key)), (1, "off", self.blob(s.value))], f"{at}.compile_specs")
                for s in d.compile_specs
            ]
        )
        return self.table(
            len(DelegateSlot),
            [
                (DelegateSlot.id, "off", id_),
                (DelegateSlot.processed, "off", processed),
                (DelegateSlot.compile_specs, "off", specs),
            ],
            at,
        )

    def plan(self, plan: ExecutionPlan, at: str) -> int:
        name = self.string(plan.name)
        values = self.tables([self.evalue(v, f"{at}.values[{i}]") for i, v in enumerate(plan.values)])
        inputs = self.scalars("i32", plan.inputs, f"{at}.inputs")
        outputs = self.scalars("i32", plan.outputs, f"{at}.outputs")
        chains = self.tables([self.chain(c, f"{at}.chains[{i}]") for i, c in enumerate(plan.chains)])
        operators = self.tables(
            [
                self.table(2, [(0, "off", self.string(o.name)), (1, "off", self.string(o.overload))], f"{at}.operators")
                for o in plan.operators
            ]
        )
        delegates = self.tables([self.delegate(d, f"{at}.delegates[{i}]") for i, d in enumerate(plan.delegates)])
        sizes = self.scalars("i64", plan.non_const_buffer_sizes, f"{at}.non_const_buffer_sizes")
        return self.table(
            len(PlanSlot),
            [
                (PlanSlot.name, "off", name),
                (PlanSlot.values, "off", values),
                (PlanSlot.inputs, "off", inputs),
                (PlanSlot.outputs, "off", outputs),
                (PlanSlot.chains, "off", chains),
                (PlanSlot.operators, "off", operators),
                (PlanSlot.delegates, "off", delegates),
                (PlanSlot.non_const_buffer_sizes, "off", sizes),
            ],
            at,
        )

    def program(self, p: PteProgram) -> bytes:
        plans = self.tables([self.plan(plan, f"execution_plan[{i}]") for i, plan in enumerate(p.execution_plans)])
        buffers = self.tables(
            [
                self.table(1, [(0, "off", self.blob(s, SCHEMA_MAX_ALIGNMENT))], "constant_buffer")
                for s in p.constant_buffers
            ]
        )
        inline = self.tables(
            [
                self.table(1, [(0, "off", self.blob(s, SCHEMA_MAX_ALIGNMENT))], "backend_delegate_data")
                for s in p.backend_delegate_data
            ]
        )
        segments = self.tables(
            [
                self.table(2, [(0, "u64", s.offset), (1, "u64", s.size)], f"segments[{i}]")
                for i, s in enumerate(p.segments)
            ]
        )
        constant_segment = 0
        if p.constant_segment is not None:
            cs = p.constant_segment
            offsets = self.scalars("u64", cs.offsets, "constant_segment.offsets")
            constant_segment = self.table(2, [(0, "u32", cs.segment_index), (1, "off", offsets)], "constant_segment")
        named = self.tables(
            [
                self.table(2, [(0, "off", self.string(n.key)), (1, "u32", n.segment_index)], f"named_data[{i}]")
                for i, n in enumerate(p.named_data)
            ]
        )
        root = self.table(
            len(ProgramSlot),
            [
                (ProgramSlot.version, "u32", p.version),
                (ProgramSlot.execution_plan, "off", plans),
                (ProgramSlot.constant_buffer, "off", buffers),
                (ProgramSlot.backend_delegate_data, "off", inline),
                (ProgramSlot.segments, "off", segments),
                (ProgramSlot.constant_segment, "off", constant_segment),
                (ProgramSlot.named_data, "off", named),
            ],
            "Program",
        )
        self.b.Finish(root, file_identifier=FILE_IDENTIFIER)
        return bytes(self.b.Output())


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def serialize(
    program: PteProgram,
    *,
    constants: Sequence[bytes] = (),
    delegate_payloads: Sequence[bytes] = (),
    named_data: Mapping[str, bytes] = {},
    segment_alignment: int = SEGMENT_ALIGNMENT,
    tensor_alignment: int = TENSOR_ALIGNMENT,
) -> bytes:
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
    for alignment, what in ((segment_alignment, "segment_alignment"), (tensor_alignment, "tensor_alignment")):
        if alignment < 1 or alignment & (alignment - 1):
            raise PteError(f"{what} {alignment} is not a power of two")
    for i, plan in enumerate(program.execution_plans):
        check_plan(plan, f"execution_plan[{i}]", len(constants) + 1, {DataLocation.INLINE: len(delegate_payloads)})
    check_state(program.execution_plans)

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
        plans.append(
            ExecutionPlan(
                plan.name,
                plan.values,
                plan.inputs,
                plan.outputs,
                plan.chains,
                plan.operators,
                delegates,
                plan.non_const_buffer_sizes,
            )
        )
    unused = sorted(set(range(len(delegate_payloads))) - used)
    if unused:
        raise PteError(f"delegate_payloads {unused} are not used by any delegate")
    named_segments: dict = {}
    named = [NamedData(key, segment_for(bytes(blob), named_segments)) for key, blob in named_data.items()]

    segments, data = [], bytearray()
    for blob in segment_blobs:
        start = _align(len(data), segment_alignment)
        data += bytes(start - len(data)) + blob
        segments.append(DataSegment(start, len(blob)))

    flat = _Writer().program(
        PteProgram(
            plans,
            program.version,
            backend_delegate_data=inline,
            segments=segments,
            constant_segment=SubsegmentOffsets(0, offsets),
            named_data=named,
        )
    )
    if not data:
        return flat
    header_length = _align(EXTENDED_HEADER_LENGTH, SCHEMA_MAX_ALIGNMENT)
    program_size = header_length + len(flat)
    base = _align(program_size, segment_alignment)
    header = ExtendedHeader(program_size, base, len(data)).encode()
    root = struct.unpack_from("<I", flat)[0] + header_length
    return b"".join(
        [
            struct.pack("<I", root),
            flat[4:8],
            header.ljust(header_length, b"\0"),
            flat[8:],
            bytes(base - program_size),
            data,
        ]
    )


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
    return serialize(
        PteProgram(plans, f.program.version), constants=constants, delegate_payloads=payloads, named_data=kept
    )
