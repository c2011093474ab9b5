"""kiln.pte (schema, reader, writer): round trips, hand-made files, hostile input, ExecuTorch 1.5.1's own files and
(marked `executorch`) ExecuTorch's own deserializer reading what kiln writes."""

import json
import random
import re
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from kiln.errors import KilnError, PteError
from kiln.lower import ethosu_payload
from kiln.pte import writer
from kiln.pte.reader import deserialize
from kiln.pte.schema import (
    FILE_IDENTIFIER,
    STATE_MEMORY_ID,
    TOSA_KEY,
    AllocationInfo,
    BackendDelegate,
    Bool,
    BoolList,
    Chain,
    DataLocation,
    DataReference,
    DataSegment,
    DelegateCall,
    DelegateCompileSpec,
    Double,
    DoubleList,
    ExecutionPlan,
    ExtendedHeader,
    ExtraTensorInfoSlot,
    Frame,
    FreeCall,
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
)
from kiln.pte.writer import _align, _Writer, serialize, without_reference_data
from tests.firmware.runtime import state_program

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
DELEGATE_FIXTURE = FIXTURES / "conv_relu_arm_delegate_ethos-u55-128.pte"
CPU_FIXTURE = FIXTURES / "conv_relu_arm_ethos-u55-128.pte"
ET_PYTHON = ROOT / ".venv-executorch" / "bin" / "python"


def planned(scalar_type, sizes, offset, memory_id=1):
    return Tensor(
        scalar_type=scalar_type,
        sizes=sizes,
        dim_order=range(len(sizes)),
        allocation_info=AllocationInfo.at(memory_id, offset),
    )


def constant(scalar_type, sizes, index):
    return Tensor(scalar_type=scalar_type, sizes=sizes, dim_order=range(len(sizes)), data_buffer_idx=index)


# A payload like Vela's, and constants of odd sizes so the 16-byte padding shows.
PAYLOAD = ethosu_payload.encode(
    b"COP1" + bytes(range(60)),
    bytes(range(100, 148)),
    512,
    [ethosu_payload.IoTensor((1, 1, 1, 8, 8, 1), 1, 256, 1)],
    [ethosu_payload.IoTensor((1, 1, 1, 4, 8, 8), 1, 0, 1)],
)
BIAS = struct.pack("<4f", 0.5, -1.0, 2.25, 0.0)  # 16 bytes
LUT = bytes([7, 8, 9])  # 3 bytes: padded to 16 when not last
WEIGHTS = bytes(range(36))  # 36 bytes, last: not padded
NAMED = {"npu.weights": b"\xaa" * 40, "npu.copy": b"\xaa" * 40, "npu.other": b"\x01\x02"}

FORWARD = ExecutionPlan(
    name="forward",
    values=[
        planned(ScalarType.FLOAT, [1, 1, 8, 8], 0),  # 0 input
        planned(ScalarType.CHAR, [1, 1, 8, 8], 256),  # 1 quantized input
        Double(0.0039),
        Int(-128),
        Int(-128),
        Int(127),
        Int(int(ScalarType.CHAR)),  # 2..6
        planned(ScalarType.CHAR, [1, 4, 8, 8], 512),  # 7 delegate output
        planned(ScalarType.FLOAT, [1, 4, 8, 8], 1024),  # 8 dequantized
        Double(0.0042),  # 9
        constant(ScalarType.FLOAT, [4], 1),  # 10 bias
        planned(ScalarType.FLOAT, [1, 4, 8, 8], 2048),  # 11 output
        Int(1),  # 12 alpha
        IntList([3, 4]),
        String("héllo"),
        Bool(True),
        DoubleList([1.5, -2.0]),  # 13..16
        BoolList([True, False, True]),
        TensorList([0, 1]),
        OptionalTensorList([0, -1]),  # 17..19
        Null(),
        constant(ScalarType.CHAR, [3], 2),
        constant(ScalarType.CHAR, [4, 1, 3, 3], 3),
        Tensor(
            scalar_type=ScalarType.LONG, sizes=[], dim_order=[], storage_offset=0, requires_grad=True, layout=0
        ),  # 23: a scalar tensor with no data
    ],
    inputs=[0],
    outputs=[11],
    chains=[
        Chain(
            inputs=[0],
            outputs=[11],
            instructions=[
                KernelCall(0, [0, 2, 3, 4, 5, 6, 1, 1]),
                DelegateCall(0, [1, 7]),
                KernelCall(1, [7, 9, 3, 4, 5, 6, 8, 8]),
                KernelCall(2, [8, 10, 12, 11, 11]),
                MoveCall(11, 11),
                JumpFalseCall(15, 6),
                FreeCall(1),
            ],
            stacktrace=[[Frame("model.py", i + 1, "forward", f"line {i}")] for i in range(7)],
        )
    ],
    operators=[
        Operator("cortex_m::quantize_per_tensor", "out"),
        Operator("cortex_m::dequantize_per_tensor", "out"),
        Operator("aten::add", "out"),
    ],
    delegates=[
        BackendDelegate(
            "EthosUBackend",
            DataReference(DataLocation.INLINE, 0),
            [DelegateCompileSpec("target", b"ethos-u55-128"), DelegateCompileSpec("output_format", b"vela")],
        )
    ],
    non_const_buffer_sizes=[0, 3072],
)

# A second method: the same payload again (shares its segment) and an empty one (stays inline).
SECOND = ExecutionPlan(
    name="second",
    values=[planned(ScalarType.CHAR, [1, 1, 8, 8], 0), planned(ScalarType.CHAR, [1, 4, 8, 8], 64)],
    inputs=[0],
    outputs=[1],
    chains=[Chain([0], [1], [DelegateCall(0, [0, 1]), DelegateCall(1, [0, 1])])],
    operators=[],
    delegates=[
        BackendDelegate("EthosUBackend", DataReference(DataLocation.INLINE, 1)),
        BackendDelegate("EmptyBackend", DataReference(DataLocation.INLINE, 2)),
    ],
    non_const_buffer_sizes=[0, 320],
)

CONSTANTS = [BIAS, LUT, WEIGHTS]
PAYLOADS = [PAYLOAD, bytes(PAYLOAD), b""]


def write_full() -> bytes:
    return serialize(PteProgram([FORWARD, SECOND]), constants=CONSTANTS, delegate_payloads=PAYLOADS, named_data=NAMED)


def as_written(plan: ExecutionPlan, refs) -> ExecutionPlan:
    """The plan with its delegates' processed references replaced by the file's."""
    delegates = [BackendDelegate(d.id, ref, d.compile_specs) for d, ref in zip(plan.delegates, refs)]
    return ExecutionPlan(
        plan.name,
        plan.values,
        plan.inputs,
        plan.outputs,
        plan.chains,
        plan.operators,
        delegates,
        plan.non_const_buffer_sizes,
    )


# --- Round trips -----------------------------------------------------------------------


def test_round_trip_keeps_plans_constants_payloads_and_named_data():
    data = write_full()
    f = deserialize(data)
    p = f.program
    # Segments worked out by hand: the constant segment (placeholder 0 bytes, BIAS 16,
    # LUT 3 padded to 16, WEIGHTS 36 last and unpadded: 68 bytes, offsets 0,0,16,32), then
    # the one distinct non-empty payload at 128, then the two distinct named blobs.
    payload_at = 128
    named_at = _align(payload_at + len(PAYLOAD), 128)
    assert p.segments == (
        DataSegment(0, 68),
        DataSegment(payload_at, len(PAYLOAD)),
        DataSegment(named_at, 40),
        DataSegment(named_at + 128, 2),
    )
    assert p.constant_segment == SubsegmentOffsets(0, (0, 0, 16, 32))
    assert p.named_data == (NamedData("npu.weights", 2), NamedData("npu.copy", 2), NamedData("npu.other", 3))
    assert p.backend_delegate_data == (b"",)
    seg = DataReference(DataLocation.SEGMENT, 1)
    assert p.execution_plans == (
        as_written(FORWARD, [seg]),
        as_written(SECOND, [seg, DataReference(DataLocation.INLINE, 0)]),
    )
    assert p.version == 0
    values = p.execution_plans[0].values
    assert f.tensor_data(values[10]) == BIAS
    assert f.tensor_data(values[21]) == LUT and f.constant(2) == LUT + bytes(13)
    assert f.tensor_data(values[22]) == WEIGHTS
    assert f.tensor_data(values[0]) is None
    delegates = [d for plan in p.execution_plans for d in plan.delegates]
    assert [f.delegate_payload(d) for d in delegates] == [PAYLOAD, PAYLOAD, b""]
    assert f.named() == NAMED


def test_without_reference_data_is_the_file_written_without_the_tosa_graphs():
    """What the runner bakes: the same program, constants, payloads and other named data,
    byte for byte the file `serialize` writes when given no TOSA graphs at all."""
    graphs = {TOSA_KEY.format(0): b"\x10" * 300, TOSA_KEY.format(1): b"graph 1"}
    assert all(key.startswith("kiln/tosa/") for key in graphs)  # kiln.pte.from_program's keys, by hand
    with_graphs = serialize(
        PteProgram([FORWARD, SECOND]), constants=CONSTANTS, delegate_payloads=PAYLOADS, named_data={**NAMED, **graphs}
    )
    assert deserialize(with_graphs).named() == {**NAMED, **graphs}
    assert without_reference_data(deserialize(with_graphs)) == write_full()
    for data in (write_full(), CPU_FIXTURE.read_bytes(), DELEGATE_FIXTURE.read_bytes()):  # nothing to leave out
        assert without_reference_data(deserialize(data)) == data


def test_extended_header_bytes_worked_out_by_hand():
    data = serialize(PteProgram([FORWARD]), constants=[BIAS, LUT, WEIGHTS], delegate_payloads=[b"\x5a" * 20])
    assert data[4:8] == b"ET12"
    assert data[8:16] == b"eh00" + bytes([32, 0, 0, 0])
    program_size, base, seg_size = struct.unpack_from("<QQQ", data, 16)
    # Segment data: constants (68 bytes), zero padding to 128, then the 20-byte payload.
    assert seg_size == 128 + 20
    assert base % 128 == 0 and 0 <= base - program_size < 128
    assert data[program_size:base] == bytes(base - program_size)
    assert len(data) == base + seg_size
    assert data[base : base + 68] == BIAS + LUT + bytes(13) + WEIGHTS
    assert data[base + 68 : base + 128] == bytes(60)
    assert data[base + 128 :] == b"\x5a" * 20
    # The root offset skips the header: the Program table's vtable offset is readable there.
    root = struct.unpack_from("<I", data)[0]
    assert 40 <= root < program_size


def test_without_segment_data_there_is_no_header():
    plan = ExecutionPlan(
        "forward", [planned(ScalarType.FLOAT, [2], 0)], [0], [0], [Chain([0], [0], [])], [], [], [0, 8]
    )
    data = serialize(PteProgram([plan]))
    assert data[8:12] != b"eh00"
    f = deserialize(data)
    assert f.header is None
    # As ExecuTorch writes it: an empty constant segment holding only the placeholder.
    assert f.program.segments == (DataSegment(0, 0),)
    assert f.program.constant_segment == SubsegmentOffsets(0, (0,))
    assert f.program.execution_plans == (plan,)


def test_large_offsets_and_64_bit_values_survive():
    plan = ExecutionPlan(
        "big",
        [planned(ScalarType.BYTE, [16], 5 * 2**32 + 7), Int(-(2**63)), IntList([1]), Double(-1e300)],
        [0],
        [0],
        [Chain([0], [0], [])],
        [],
        [],
        [0, 6 * 2**32],
    )
    f = deserialize(serialize(PteProgram([plan])))
    t = f.program.execution_plans[0].values[0]
    assert t.allocation_info == AllocationInfo(1, 7, 5) and t.allocation_info.offset == 5 * 2**32 + 7
    assert f.program.execution_plans == (plan,)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(values=[constant(ScalarType.FLOAT, [4], 9)]), "data_buffer_idx is 9"),
        (dict(chains=[Chain([], [], [KernelCall(5, [])])]), "op_index is 5"),
        (dict(chains=[Chain([], [], [KernelCall(0, [0, 99])])], operators=[Operator("x")]), "args[1] is 99"),
        (dict(delegates=[BackendDelegate("X", DataReference(DataLocation.INLINE, 3))]), "index is 3"),
        (dict(delegates=[BackendDelegate("X", DataReference(DataLocation.SEGMENT, 0))]), "location"),
        (dict(values=[planned(ScalarType.FLOAT, [4], 8)]), "overrun planned buffer 1"),
        (dict(values=[planned(ScalarType.FLOAT, [4], 0, memory_id=0)]), "memory_id is 0"),
        (dict(values=[Int(2**63)]), "outside the range of i64"),
        (dict(values=[Tensor(scalar_type=ScalarType.FLOAT, sizes=[2, 3], dim_order=[0, 0])]), "dim_order"),
        (dict(inputs=[4]), "inputs[0] is 4"),
    ],
)
def test_serialize_refuses_programs_that_refer_to_nothing(change, message):
    fields = dict(
        name="m",
        values=[Int(0)],
        inputs=[0],
        outputs=[0],
        chains=[],
        operators=[],
        delegates=[],
        non_const_buffer_sizes=[0, 16],
    )
    fields.update(change)
    with pytest.raises(PteError, match=re.escape(message)):
        serialize(
            PteProgram([ExecutionPlan(**fields)]),
            constants=[b"\0" * 16],
            delegate_payloads=[b"x"] * ("delegates" in change),
        )


def test_serialize_refuses_unused_payloads_and_prefilled_storage():
    with pytest.raises(PteError, match=r"delegate_payloads \[0\] are not used"):
        serialize(PteProgram([]), delegate_payloads=[b"x"])
    with pytest.raises(PteError, match="segments must be empty"):
        serialize(PteProgram([], segments=[DataSegment(0, 1)]))


# --- State shared by methods (memory id 2) ------------------------------------------------


def test_state_tensors_keep_their_names_and_places_through_a_round_trip():
    f = deserialize(state_program.write())
    assert list(f.program.execution_plans) == state_program.plans()
    for plan in f.program.execution_plans:
        states = [(v.name, v.allocation_info.memory_id, v.allocation_info.offset)
                  for v in plan.values[:2]]  # fmt: skip
        assert states == [("acc", 2, 0), ("steps", 2, 16)]
        assert plan.non_const_buffer_sizes[STATE_MEMORY_ID] == state_program.STATE_ARENA


def _moved_acc(plans):
    acc = plans[1].values[0]
    return [plans[0], state_program.with_values(plans[1], v0=replace(acc, allocation_info=AllocationInfo.at(2, 16)))]


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda plans: [plans[0], replace(plans[1], non_const_buffer_sizes=[0, 48, 64])],
            "execution_plan[1].non_const_buffer_sizes[2] is 64, but execution_plan[0]'s is 32",
        ),
        (
            _moved_acc,
            "execution_plan[1].values[0], state 'acc': 16 bytes at offset 16 of the state arena, but 16 bytes at "
            "offset 0 in execution_plan[0]",
        ),
    ],
)
def test_writer_and_reader_refuse_a_state_arena_methods_cannot_share(damage, message, monkeypatch):
    with pytest.raises(PteError, match=re.escape(message)):
        state_program.write(damage)
    monkeypatch.setattr(writer, "check_state", lambda *args, **kwargs: None)
    data = state_program.write(damage)
    with pytest.raises(PteError, match=re.escape(message)):
        deserialize(data)


@pytest.mark.parametrize(
    "field, message",
    [
        (ExtraTensorInfoSlot.location, "places the tensor's data in a mutable data segment or outside the file"),
        (ExtraTensorInfoSlot.device_type, "places the tensor on device type 1, not the CPU (0)"),
    ],
)
def test_reader_refuses_tensor_data_outside_the_file_or_the_cpu(field, message, monkeypatch):
    """location 1 (EXTERNAL: the data found by name elsewhere), device_type 1 (CUDA)."""
    state_program.extra_fields(monkeypatch, (field, "i8", 1))
    with pytest.raises(PteError, match=re.escape(f"execution_plan[0].values[0].val.extra_tensor_info {message}")):
        deserialize(state_program.write())


# --- A file assembled by hand ------------------------------------------------------------


def hand_made() -> bytearray:
    """Program{version 7, execution_plan [{name "fwd", values [Int 42]}]}, laid out by hand:
    0x00 root offset, 0x04 ET12, 0x08 Program vtable, 0x10 Program, 0x1C plans vector,
    0x24 plan vtable, 0x30 plan, 0x3C "fwd", 0x44 values vector, 0x4C EValue vtable,
    0x54 EValue, 0x60 Int vtable, 0x68 Int (its long at 0x70)."""
    h = bytearray()
    h += struct.pack("<I4s", 0x10, b"ET12")
    h += struct.pack("<4H", 8, 12, 4, 8)  # version at +4, execution_plan at +8
    h += struct.pack("<iII", 8, 7, 0x1C - 0x18)  # Program: soffset, version, offset
    h += struct.pack("<II", 1, 0x30 - 0x20)  # plans: count, offset to plan
    h += struct.pack("<5H2x", 10, 12, 4, 0, 8)  # name +4, (no container_meta_type), values +8
    h += struct.pack("<iII", 0x30 - 0x24, 0x3C - 0x34, 0x44 - 0x38)  # plan
    h += struct.pack("<I4s", 3, b"fwd\0")
    h += struct.pack("<II", 1, 0x54 - 0x48)  # values: count, offset to EValue
    h += struct.pack("<4H", 8, 12, 4, 8)  # val_type at +4, val at +8
    h += struct.pack("<iB3xI", 0x54 - 0x4C, int(KernelTypes.Int), 0x68 - 0x5C)
    h += struct.pack("<3H2x", 6, 16, 8)  # int_val at +8
    h += struct.pack("<i4xq", 0x68 - 0x60, 42)
    assert len(h) == 0x78
    return h


def test_reads_a_file_assembled_by_hand():
    p = deserialize(bytes(hand_made())).program
    assert p.version == 7
    assert p.execution_plans == (ExecutionPlan("fwd", [Int(42)], [], [], [], [], [], []),)
    assert p.segments == () and p.constant_segment is None


@pytest.mark.parametrize(
    "offset, fmt, value, message",
    [
        (0x00, "<I", 0x1000, "root offset|outside the program"),
        (0x04, "<4s", b"ET11", "file identifier is b'ET11'"),
        (0x10, "<i", -0x100, "vtable"),
        (0x08, "<H", 3, "vtable at offset 8 has a bad size 3"),
        (0x0C, "<H", 200, r"version: field at offset 200 lies outside its table"),
        (0x1C, "<I", 2**30, "execution_plan: 1073741824 elements"),
        (0x3C, "<I", 200, r"name: 200 elements"),
        (0x43, "<B", ord("!"), "not NUL-terminated"),
        (0x40, "<B", 0xFF, "not UTF-8"),
        (0x58, "<B", 99, "val_type is 99, not a KernelTypes"),
        (0x58, "<B", 0, "val_type is 0"),
        (0x5C, "<I", 0x7FFFFFFF, "val"),
    ],
)
def test_hand_made_file_with_one_bad_field(offset, fmt, value, message):
    h = hand_made()
    struct.pack_into(fmt, h, offset, value)
    with pytest.raises(PteError, match=message):
        deserialize(bytes(h))


# --- Hostile input ----------------------------------------------------------------------


def samples():
    return {
        "kiln": write_full(),
        "et-delegate": DELEGATE_FIXTURE.read_bytes(),
        "et-cpu": CPU_FIXTURE.read_bytes(),
        "hand": bytes(hand_made()),
    }


@pytest.mark.parametrize("name", ["kiln", "et-delegate", "et-cpu", "hand"])
def test_every_truncation_is_a_pte_error(name):
    data = samples()[name]
    deserialize(data)
    step = 1 if len(data) < 5000 else 7
    for n in range(0, len(data), step):
        with pytest.raises(PteError):
            deserialize(data[:n])


@pytest.mark.parametrize("name", ["kiln", "et-delegate", "et-cpu", "hand"])
def test_random_byte_flips_give_a_pte_error_or_a_valid_program(name):
    data = samples()[name]
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(1500):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        try:
            deserialize(bytes(mutated))
            outcomes["ok"] += 1
        except PteError as e:
            assert isinstance(e, KilnError) and str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_random_garbage_after_a_valid_prefix():
    """Garbage over the header or the flatbuffer: a PteError with a message, or a program.
    Garbage only over the segment data after the flatbuffer: the same program, and each
    segment is the file's bytes where ExecuTorch's extended header places it."""
    rng = random.Random(99)
    data = write_full()
    # The extended header read by hand: b"eh00" at 8, then length, program_size, segment_base_offset.
    assert data[8:12] == b"eh00"
    segment_base = struct.unpack_from("<Q", data, 24)[0]
    original = deserialize(data).program
    outcomes = {"error": 0, "program": 0, "segments only": 0}
    for _ in range(300):
        cut = rng.randrange(8, len(data))
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        mutated = data[:cut] + garbage + data[cut + len(garbage) :]
        if segment_base <= cut and cut + len(garbage) <= len(data):
            f = deserialize(mutated)
            assert f.program == original
            for i, segment in enumerate(original.segments):
                at = segment_base + segment.offset
                assert f.segment(i) == mutated[at : at + segment.size]
            outcomes["segments only"] += 1
            continue
        try:
            deserialize(mutated)
            outcomes["program"] += 1
        except PteError as e:
            assert isinstance(e, KilnError) and str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["segments only"] > 0, outcomes


def test_overlapping_vectors_cannot_make_reading_slow():
    # 2000 values all pointing at one IntList whose items are most of the file: a reader
    # without a work limit would decode 2000 x 10000 items.
    big = IntList([0] * 10000)
    flat = _Writer()
    values = flat.tables([flat.evalue(big, "v")] * 2000)
    plan = flat.table(len(PlanSlot), [(PlanSlot.values, "off", values)], "plan")
    root = flat.table(len(ProgramSlot), [(ProgramSlot.execution_plan, "off", flat.tables([plan]))], "p")
    flat.b.Finish(root, file_identifier=FILE_IDENTIFIER)
    with pytest.raises(PteError, match="overlap"):
        deserialize(bytes(flat.b.Output()))


def bad_program(**storage) -> bytes:
    """A program written without serialize's checks, to see the reader's."""
    plan = storage.pop("plan", ExecutionPlan("m", [], [], [], [], [], [], []))
    return _Writer().program(PteProgram([plan], **storage))


@pytest.mark.parametrize(
    "storage, message",
    [
        (dict(segments=[DataSegment(0, 10**6)]), r"segments\[0\] \(offset 0, size 1000000\) runs past"),
        (dict(segments=[DataSegment(2**63, 1)]), "runs past"),
        (dict(constant_segment=SubsegmentOffsets(3, (0,))), "constant_segment.segment_index is 3"),
        (dict(named_data=[NamedData("k", 0)]), r"named_data\[0\].segment_index is 0"),
        (
            dict(constant_buffers=[b""], segments=[DataSegment(0, 0)], constant_segment=SubsegmentOffsets(0, (0,))),
            "both constant_buffer and constant_segment",
        ),
        (
            dict(
                plan=ExecutionPlan("m", [constant(ScalarType.FLOAT, [4], 1)], [], [], [], [], [], []),
                constant_buffers=[b"", b"\0" * 8],
            ),
            "needs 16 bytes of constant 1, which holds 8",
        ),
        (
            dict(
                plan=ExecutionPlan(
                    "m", [], [], [], [], [], [BackendDelegate("E", DataReference(DataLocation.SEGMENT, 0))], []
                )
            ),
            "processed.index is 0",
        ),
    ],
)
def test_reader_checks_storage_references(storage, message):
    with pytest.raises(PteError, match=message):
        deserialize(bad_program(**storage))


def test_bad_extended_headers():
    data = bytearray(write_full())
    for offset, value, message in [
        (12, 8, "header length is 8"),
        (16, len(data) + 1, "program_size"),
        (24, len(data) + 128, "segment_base_offset"),
        (32, len(data), "segment data"),
    ]:
        bad = bytearray(data)
        struct.pack_into("<I" if offset == 12 else "<Q", bad, offset, value)
        with pytest.raises(PteError, match=message):
            deserialize(bytes(bad))
    with pytest.raises(PteError, match="too short"):
        deserialize(b"\0\0\0\0ET1")


def test_unsupported_features_are_named():
    # mutable_data_segments (slot 6) present and non-empty.
    flat = _Writer()
    seg = flat.table(2, [(0, "u32", 0), (1, "off", flat.scalars("u64", [0], "o"))], "s")
    root = flat.table(len(ProgramSlot), [(ProgramSlot.mutable_data_segments, "off", flat.tables([seg]))], "p")
    flat.b.Finish(root, file_identifier=FILE_IDENTIFIER)
    with pytest.raises(PteError, match="mutable_data_segments"):
        deserialize(bytes(flat.b.Output()))


# --- ExecuTorch 1.5.1's own files ---------------------------------------------------------
# Expected values below were read with ExecuTorch's deserializer (tests/tools/et_dump.py).


def test_reads_executorch_arm_delegate_fixture():
    f = deserialize(DELEGATE_FIXTURE.read_bytes())
    assert f.header is None
    p = f.program
    assert p.segments == (DataSegment(0, 0),) and p.constant_segment.offsets == (0,)
    (plan,) = p.execution_plans
    assert plan.operators == (
        Operator("cortex_m::quantize_per_tensor", "out"),
        Operator("cortex_m::dequantize_per_tensor", "out"),
    )
    assert plan.non_const_buffer_sizes == (0, 1280)
    assert plan.inputs == (0,) and plan.outputs == (8,)
    assert plan.chains[0].instructions == (
        KernelCall(0, (0, 2, 3, 4, 5, 6, 1, 1)),
        DelegateCall(0, (1, 7)),
        KernelCall(1, (7, 9, 10, 11, 12, 13, 8, 8)),
    )
    assert plan.values[0] == planned(ScalarType.FLOAT, [1, 1, 8, 8], 0)
    assert plan.values[1] == planned(ScalarType.CHAR, [1, 1, 8, 8], 256)
    assert plan.values[7] == planned(ScalarType.CHAR, [1, 4, 8, 8], 1024)
    assert plan.values[3:7] == (Int(-128), Int(-128), Int(127), Int(1))
    (delegate,) = plan.delegates
    assert delegate.id == ethosu_payload.DELEGATE_ID
    assert delegate.processed == DataReference(DataLocation.INLINE, 0)
    specs = {s.key: s.value for s in delegate.compile_specs}
    assert specs["target"] == b"ethos-u55-128" and specs["output_format"] == b"vela"
    payload = f.delegate_payload(delegate)
    assert len(payload) == 1184
    vela = ethosu_payload.decode(payload)
    assert vela.cmd_data[:4] == b"COP1" and vela.scratch_size == 512
    assert vela.inputs == (ethosu_payload.IoTensor((1, 1, 1, 8, 8, 1), 1, 256, 1),)


def test_reads_executorch_arm_cpu_fixture_with_constant_segment():
    f = deserialize(CPU_FIXTURE.read_bytes())
    assert f.header == ExtendedHeader(3832, 3840, 144)
    p = f.program
    assert p.segments == (DataSegment(0, 144),)
    assert p.constant_segment == SubsegmentOffsets(0, (0, 0, 16, 48, 96, 112, 128))
    (plan,) = p.execution_plans
    assert [o.name for o in plan.operators] == [
        "quantized_decomposed::dequantize_per_channel",
        "cortex_m::quantize_per_tensor",
        "cortex_m::dequantize_per_tensor",
        "aten::convolution",
        "aten::relu",
    ]
    consts = [v for v in plan.values if isinstance(v, Tensor) and v.data_buffer_idx]
    assert [(t.sizes, t.scalar_type, t.data_buffer_idx) for t in consts] == [
        ((4,), ScalarType.FLOAT, 1),
        ((4,), ScalarType.LONG, 2),
        ((4, 1, 3, 3), ScalarType.CHAR, 3),
        ((4,), ScalarType.FLOAT, 4),
        ((4,), ScalarType.INT, 5),
        ((4,), ScalarType.INT, 6),
    ]
    assert all(t.allocation_info is None for t in consts)
    assert f.tensor_data(consts[2]) == bytes.fromhex(
        "ff53818ec529fd7af223d8e681a8c9053550a1c33374e369e90f7f82abdecb75a8c2a181"
    )
    assert f.constant(3) == f.tensor_data(consts[2]) + bytes(12)


@pytest.mark.parametrize("fixture", [CPU_FIXTURE, DELEGATE_FIXTURE], ids=["cpu", "delegate"])
def test_run_host_runs_executorch_fixtures_close_to_eager(fixture):
    """ExecuTorch's programs on kiln run-host (the CPU-only one's weights dequantized per
    channel at run time; the delegate's command stream on kiln's NPU model) against the
    fixture's own float model in eager PyTorch: within two output quantization steps (the
    int8 programs quantize input, weights and output)."""
    import importlib.util

    import numpy as np
    import torch

    from kiln.reference import run_host as host

    spec = importlib.util.spec_from_file_location("conv_relu", FIXTURES / "conv_relu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = module.ModelInputs[0]
    with torch.no_grad():
        expected = module.ModelUnderTest(x).numpy()
    (got,) = host.run(fixture.read_bytes(), [x.numpy()])
    plan = deserialize(CPU_FIXTURE.read_bytes()).program.execution_plans[0]
    output_scale = plan.values[48].value  # the CPU program's final quantize's scale (same calibration)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert np.abs(got - expected).max() <= 2 * output_scale
    assert (got > 0).mean() > 0.3  # not all clipped away


# --- ExecuTorch's own deserializer reading kiln's file ---------------------------------------


def et_value(d):
    """A kiln value from ExecuTorch's JSON (field names as in program.fbs)."""
    kind = d["_type"]
    if kind == "Tensor":
        a = d["allocation_info"]
        return Tensor(
            scalar_type=ScalarType(d["scalar_type"]),
            sizes=d["sizes"],
            dim_order=d["dim_order"],
            storage_offset=d["storage_offset"],
            requires_grad=d["requires_grad"],
            data_buffer_idx=d["data_buffer_idx"],
            allocation_info=a and AllocationInfo(a["memory_id"], a["memory_offset_low"], a["memory_offset_high"]),
            layout=d["layout"],
            shape_dynamism=d["shape_dynamism"],
        )
    scalar = {
        "Int": (Int, "int_val"),
        "Bool": (Bool, "bool_val"),
        "Double": (Double, "double_val"),
        "String": (String, "string_val"),
    }
    if kind in scalar:
        cls, name = scalar[kind]
        return cls(d[name])
    if kind == "Null":
        return Null()
    return {
        "IntList": IntList,
        "DoubleList": DoubleList,
        "BoolList": BoolList,
        "TensorList": TensorList,
        "OptionalTensorList": OptionalTensorList,
    }[kind](d["items"])


def et_instruction(d):
    cls = {
        "KernelCall": KernelCall,
        "DelegateCall": DelegateCall,
        "MoveCall": MoveCall,
        "JumpFalseCall": JumpFalseCall,
        "FreeCall": FreeCall,
    }[d["_type"]]
    return cls(*[d[k] for k in d if k != "_type"])


needs_executorch = pytest.mark.skipif(
    not ET_PYTHON.exists(),
    reason="ExecuTorch 1.5.1 environment .venv-executorch is missing: run ./scripts/executorch_env.sh",
)


def et_tool(script: str, *arguments) -> dict:
    """The JSON a tool of tests/tools prints, run with ExecuTorch's Python."""
    run = subprocess.run(
        [str(ET_PYTHON), str(ROOT / "tests" / "tools" / script), *map(str, arguments)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def _dumped(path: Path) -> dict:
    """ExecuTorch's reading of the .pte at `path` (tests/tools/et_dump.py)."""
    return et_tool("et_dump.py", path)


@pytest.fixture(scope="module")
def et_dump(tmp_path_factory):
    path = tmp_path_factory.mktemp("et") / "kiln.pte"
    path.write_bytes(write_full())
    return path.read_bytes(), _dumped(path)


@pytest.mark.executorch
@needs_executorch
def test_executorch_reads_plans_values_and_instructions(et_dump):
    _, dump = et_dump
    plans = dump["restored"]["execution_plan"]
    assert [p["name"] for p in plans] == ["forward", "second"]
    for ours, theirs in zip([FORWARD, SECOND], plans):
        assert [Operator(o["name"], o["overload"]) for o in theirs["operators"]] == list(ours.operators)
        assert [et_value(v["val"]) for v in theirs["values"]] == list(ours.values)
        assert theirs["inputs"] == list(ours.inputs) and theirs["outputs"] == list(ours.outputs)
        assert theirs["non_const_buffer_sizes"] == list(ours.non_const_buffer_sizes)
        for chain, et_chain in zip(ours.chains, theirs["chains"]):
            assert [et_instruction(i["instr_args"]) for i in et_chain["instructions"]] == list(chain.instructions)
            assert et_chain["inputs"] == list(chain.inputs)
        for d, et_d in zip(ours.delegates, theirs["delegates"]):
            assert et_d["id"] == d.id
            assert [(c["key"], bytes.fromhex(c["value"])) for c in et_d["compile_specs"]] == [
                (c.key, c.value) for c in d.compile_specs
            ]
    frames = plans[0]["chains"][0]["stacktrace"]
    assert [[f["lineno"] for f in fl["items"]] for fl in frames] == [[i + 1] for i in range(7)]


@pytest.mark.executorch
@needs_executorch
def test_executorch_reads_constants_payloads_and_named_data(et_dump):
    data, dump = et_dump
    restored = dump["restored"]
    # ExecuTorch restores each constant with the padding up to the next one.
    buffers = [bytes.fromhex(b["storage"]) for b in restored["constant_buffer"]]
    assert buffers == [b"", BIAS, LUT + bytes(13), WEIGHTS]
    inline = [bytes.fromhex(b["data"]) for b in restored["backend_delegate_data"]]
    payloads = [inline[d["processed"]["index"]] for p in restored["execution_plan"] for d in p["delegates"]]
    assert payloads == [PAYLOAD, PAYLOAD, b""]
    assert {k: bytes.fromhex(v) for k, v in dump["named_data"].items()} == NAMED
    stored = dump["stored"]
    assert [d["processed"] for p in stored["execution_plan"] for d in p["delegates"]] == [
        {"_type": "BackendDelegateDataReference", "location": 1, "index": 1}
    ] * 2 + [{"_type": "BackendDelegateDataReference", "location": 0, "index": 0}]


@pytest.mark.executorch
@needs_executorch
def test_executorch_reads_state_tensors_of_two_methods(tmp_path):
    """kiln's two-plan program with its state arena (tests/firmware/runtime/state_program.py), as
    ExecuTorch's deserializer reads it: the arena's size in both plans, each state tensor in
    memory id 2 at its offset, named by extra_tensor_info."""
    path = tmp_path / "state.pte"
    path.write_bytes(state_program.write())
    plans = _dumped(path)["restored"]["execution_plan"]
    assert [p["name"] for p in plans] == list(state_program.METHODS)
    for plan in plans:
        assert plan["non_const_buffer_sizes"] == [0, state_program.ACTIVATIONS[plan["name"]], 32]
        states = [v["val"] for v in plan["values"][:2]]
        assert [(t["allocation_info"]["memory_id"], t["allocation_info"]["memory_offset_low"]) for t in states] == [
            (2, 0),
            (2, 16),
        ]
        assert [
            (t["extra_tensor_info"]["fully_qualified_name"], t["extra_tensor_info"]["location"]) for t in states
        ] == [
            ("acc", 0),
            ("steps", 0),
        ]
        assert [t["data_buffer_idx"] for t in states] == [0, 0]


@pytest.mark.executorch
@needs_executorch
def test_layout_matches_executorch_serializer(et_dump):
    """ExecuTorch's serialize_pte_binary, given the program it read back, lays out the
    same segments, constant offsets, delegate and named-data references, segment bytes."""
    data, dump = et_dump
    f = deserialize(data)
    ours = {
        "length": 32,
        "program_size": f.header.program_size,
        "segment_base_offset": f.header.segment_base_offset,
        "segment_data_size": f.header.segment_data_size,
    }
    assert dump["header"] == ours
    again = dump["reserialized"]
    assert again["header"]["segment_data_size"] == f.header.segment_data_size
    assert [(s["offset"], s["size"]) for s in again["segments"]] == [(s.offset, s.size) for s in f.program.segments]
    assert again["constant_segment"]["offsets"] == list(f.program.constant_segment.offsets)
    assert [(d["location"], d["index"]) for d in again["delegates"]] == [
        (d.processed.location, d.processed.index) for p in f.program.execution_plans for d in p.delegates
    ]
    assert [(n["key"], n["segment_index"]) for n in again["named_data"]] == [
        (n.key, n.segment_index) for n in f.program.named_data
    ]
    assert bytes.fromhex(again["segment_data"]) == data[f.header.segment_base_offset :]
