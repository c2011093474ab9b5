"""The Ethos-U delegate's payload parser (firmware/delegates/ethosu/payload.cpp) built for the
host under AddressSanitizer and UBSan (`runtime_host parse-payload`).

References independent of the C++ code: payloads written by kiln.lower.ethosu_payload.encode
(and ExecuTorch's own, in tests/fixtures), and the tensors' offsets and byte counts worked out
here from the records. The parser keeps no copy of the I/O records (the Payload points at the
checked records inside the payload), so any count the blocks hold parses; a count the block
cannot hold, a block longer than its count, or a record outside the scratch is refused by name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from pathlib import Path

import pytest

from kiln.lower import ethosu_payload as ep
from kiln.lower.ethosu_payload import IoTensor
from kiln.pte.reader import deserialize
from tests.firmware.runtime.helpers import run_tool

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
CMD = b"COP1" + bytes(range(1, 29))
WEIGHTS = bytes(range(40))
SCRATCH = 64 * 1024
BAD_PAYLOAD = "error 0x401 delegate: bad payload: "


def many_ios(count: int, first_offset: int) -> list[IoTensor]:
    """`count` tensors of varied shapes and element sizes packed one after another from
    `first_offset` (every 16 bytes), like the state tensors of an unrolled recurrent layer."""
    ios, offset = [], first_offset
    for i in range(count):
        elem_size = (1, 2, 4)[i % 3]
        shape = (1, 1, 1, 1 + i % 4, 1 + i % 5, 8 + i)
        ios.append(IoTensor(shape, elem_size, offset, 1))  # region 1: the scratch
        offset += -(-math.prod(shape) * elem_size // 16) * 16
    return ios


def expected(ios) -> list[list[int]]:
    return [[io.offset, math.prod(io.shape) * io.elem_size, io.elem_size] for io in ios]


def parse(runtime_host: Path, tmp_path: Path, data: bytes, name: str = "payload.bin"):
    path = tmp_path / name
    path.write_bytes(data)
    return run_tool(runtime_host, "parse-payload", path)


def block(name: str, data: bytes) -> bytes:
    """One block written out as the header comment of ethosu_payload.h describes it."""
    return ep.BLOCK_HEADER.pack(name.encode(), len(data), 0, bytes(11)) + data + bytes(-len(data) % 16)


def raw_payload(inputs: bytes, outputs: bytes, scratch: int = SCRATCH) -> bytes:
    """A payload with the inputs/outputs blocks' bytes as given (count and records)."""
    return b"".join(
        [
            block("vela_bin_stream", b""),
            block("cmd_data", CMD),
            block("weight_data", WEIGHTS),
            block("scratch_size", struct.pack("<I", scratch)),
            block("inputs", inputs),
            block("outputs", outputs),
            block("vela_end_stream", b""),
        ]
    )


def records(ios) -> bytes:
    return b"".join(ep.IO_TENSOR.pack(*io.shape, io.elem_size, io.offset, io.region) for io in ios)


def io_block(ios) -> bytes:
    """An inputs/outputs block's data: int32 count, then the records."""
    return _count(len(ios)) + records(ios)


INPUTS = many_ios(40, 0)
OUTPUTS = many_ios(40, 32 * 1024)


def test_forty_inputs_and_forty_outputs_parse(runtime_host, tmp_path):
    data = ep.encode(CMD, WEIGHTS, SCRATCH, INPUTS, OUTPUTS)
    assert raw_payload(io_block(INPUTS), io_block(OUTPUTS)) == data  # the blocks as written here
    assert max(o + n for o, n, _ in expected(OUTPUTS)) <= SCRATCH
    done = parse(runtime_host, tmp_path, data)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    # cmd_data's data after two headers; weight_data's after cmd_data's padded data and a header
    assert got["cmd"] == [64, len(CMD)]
    assert got["weights"] == [64 + 32 + 32, len(WEIGHTS)]
    assert got["scratch_size"] == SCRATCH
    assert got["inputs"] == expected(INPUTS) and got["outputs"] == expected(OUTPUTS)
    # No per-tensor storage: pointers, sizes and counts only (8-byte pointers on the host).
    assert got["sizeof_payload"] <= 64


def test_executorch_payload_parses_as_kiln_reads_it(runtime_host, tmp_path):
    f = deserialize((FIXTURES / "conv_relu_arm_delegate_ethos-u55-128.pte").read_bytes())
    data = f.delegate_payload(f.program.execution_plans[0].delegates[0])
    vela = ep.decode(data)
    done = parse(runtime_host, tmp_path, data)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    assert got["scratch_size"] == vela.scratch_size
    assert got["inputs"] == expected(vela.inputs) and got["outputs"] == expected(vela.outputs)


def _count(n: int) -> bytes:
    return struct.pack("<i", n)


def _with(ios, index, **change) -> list[IoTensor]:
    ios = list(ios)
    ios[index] = dataclasses.replace(ios[index], **change)
    return ios


LAST = OUTPUTS[-1]
LAST_BYTES = math.prod(LAST.shape) * LAST.elem_size
HOSTILE = {
    # a count the block cannot hold: far too many, negative, one more than its 40 records
    "count_huge": (
        _count(0x7FFF_FFFF) + records(INPUTS),
        io_block(OUTPUTS),
        "NPU input/output count does not fit its block (0x7fffffff)",
    ),
    "count_negative": (
        io_block(INPUTS),
        _count(-1) + records(OUTPUTS),
        "NPU input/output count does not fit its block (0xffffffff)",
    ),
    "count_one_more": (
        _count(41) + records(INPUTS),
        io_block(OUTPUTS),
        "NPU input/output count does not fit its block (0x29)",
    ),
    # a count the block holds, but the block is longer: its size is named (4 + 40 * 36 = 0x5a4)
    "count_one_less": (
        _count(39) + records(INPUTS),
        io_block(OUTPUTS),
        "inputs/outputs block size does not match its count (0x5a4)",
    ),
    "block_no_count": (io_block(INPUTS), b"\x01\x00", "inputs/outputs block size does not match its count (0x2)"),
    # a record outside the scratch: the last output one byte past its end, one far out
    "record_past_scratch_end": (
        io_block(INPUTS),
        io_block(_with(OUTPUTS, 39, offset=SCRATCH - LAST_BYTES + 1)),
        f"NPU tensor outside the scratch ({SCRATCH - LAST_BYTES + 1:#x})",
    ),
    "record_far_out": (
        io_block(_with(INPUTS, 17, offset=0x7FFF_FFF0)),
        io_block(OUTPUTS),
        "NPU tensor outside the scratch (0x7ffffff0)",
    ),
    "record_negative_offset": (
        io_block(_with(INPUTS, 3, offset=-16)),
        io_block(OUTPUTS),
        "NPU tensor outside the scratch (0xfffffff0)",
    ),
    # more elements than 2^31 (the 64-bit product is checked after every dimension)
    "record_shape_overflow": (
        io_block(_with(INPUTS, 0, shape=(1, 1, 65536, 65536, 2, 1))),
        io_block(OUTPUTS),
        "NPU tensor shape invalid (0x{at:x})",
    ),
    "record_wrong_region": (
        io_block(INPUTS),
        io_block(_with(OUTPUTS, 5, region=2)),
        "NPU tensor not in the scratch region (0x2)",
    ),
    "record_elem_size": (
        io_block(_with(INPUTS, 39, elem_size=3)),
        io_block(OUTPUTS),
        "NPU tensor element size not 1, 2 or 4 (0x3)",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_io_blocks_are_refused_by_name(runtime_host, tmp_path, case):
    inputs, outputs, message = HOSTILE[case]
    data = raw_payload(inputs, outputs)
    inputs_data_at = data.index(b"inputs\0") + 32
    done = parse(runtime_host, tmp_path, data)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == BAD_PAYLOAD + message.format(at=inputs_data_at) + "\n"


def test_every_truncation_and_flip_is_refused_or_stays_inside_the_scratch(runtime_host, tmp_path):
    """Every truncation and single-byte flip (3 masks) of the 40 + 40 payload, under ASan: each
    either parses with every tensor inside its scratch or is refused with a named fault."""
    data = ep.encode(CMD, WEIGHTS, SCRATCH, INPUTS, OUTPUTS)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    done = run_tool(runtime_host, "parse-payload", path, "--corrupt")
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = json.loads(done.stdout)
    assert sum(outcomes.values()) == len(data) * 4
    assert "parsed, a tensor outside the scratch" not in outcomes
    assert not any(k.startswith("unknown") for k in outcomes), outcomes
    assert outcomes["parsed"] > 0  # e.g. flips in the command stream's body or the weights
    for fault in (
        "NPU input/output count does not fit its block",
        "NPU tensor outside the scratch",
        "payload size not a multiple of 16",
    ):
        assert outcomes.get(fault, 0) > 0, outcomes
