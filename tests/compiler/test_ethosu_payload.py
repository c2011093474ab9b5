"""kiln.lower.ethosu_payload: bytes worked out by hand, ExecuTorch 1.5.1's payloads byte for byte,
and hostile input."""

import random
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kiln.lower import ethosu_payload as ep
from kiln.lower.ethosu_payload import IoTensor, PayloadError
from kiln.pte.reader import deserialize

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
ET_PYTHON = ROOT / ".venv-executorch" / "bin" / "python"

INPUT = IoTensor((1, 1, 1, 8, 8, 1), 1, 256, 1)
OUTPUT = IoTensor((1, 1, 1, 4, 8, 8), 1, 0, 1)


def small() -> bytes:
    return ep.encode(b"COP1\x01\x02\x03\x04", b"\xaa\xbb\xcc", 512, [INPUT], [OUTPUT])


def block(name: bytes, size: int, data_hex: str, external: int = 0) -> bytes:
    """A block header written out field by field: 16-byte name, uint32 size, flag, 11 zeros."""
    return name.ljust(16, b"\0") + size.to_bytes(4, "little") + bytes([external]) + bytes(11) + bytes.fromhex(data_hex)


def test_encode_matches_bytes_worked_out_by_hand():
    expected = b"".join(
        [
            block(b"vela_bin_stream", 0, ""),
            block(b"cmd_data", 8, "434f5031 01020304" + "00" * 8),
            block(b"weight_data", 3, "aabbcc" + "00" * 13),
            block(b"scratch_size", 4, "00020000" + "00" * 12),
            # count 1; shape 1,1,1,8,8,1; elem_size 1; offset 256; region 1; 8 bytes of padding
            block(
                b"inputs",
                40,
                "01000000 01000000 01000000 01000000 08000000 08000000 0100000001000000 00010000 01000000" + "00" * 8,
            ),
            block(
                b"outputs",
                40,
                "01000000 01000000 01000000 01000000 04000000 08000000 0800000001000000 00000000 01000000" + "00" * 8,
            ),
            block(b"vela_end_stream", 0, ""),
        ]
    )
    assert len(expected) == 7 * 32 + 16 + 16 + 16 + 48 + 48
    assert small() == expected


def test_decode_round_trip():
    v = ep.decode(small())
    assert (v.cmd_data, v.weight_data, v.scratch_size) == (b"COP1\x01\x02\x03\x04", b"\xaa\xbb\xcc", 512)
    assert v.inputs == (INPUT,) and v.outputs == (OUTPUT,) and v.external == {}
    empty = ep.decode(ep.encode(b"COP2", b"", 0, [], []))
    assert empty.inputs == () and empty.weight_data == b"" and empty.cmd_data == b"COP2"


def test_executorch_payload_byte_for_byte():
    """The payload ExecuTorch 1.5.1's Arm flow wrote decodes, and encoding it again gives
    the same bytes."""
    f = deserialize((FIXTURES / "conv_relu_arm_delegate_ethos-u55-128.pte").read_bytes())
    (delegate,) = f.program.execution_plans[0].delegates
    payload = f.delegate_payload(delegate)
    v = ep.decode(payload)
    assert (len(v.cmd_data), len(v.weight_data), v.scratch_size) == (692, 144, 512)
    assert v.inputs == (INPUT,) and v.outputs == (OUTPUT,)
    assert ep.encode(v.cmd_data, v.weight_data, v.scratch_size, v.inputs, v.outputs) == payload


def test_external_blocks_resolve_through_named_data():
    key = "ab" * 32
    weights = bytes(range(20))
    data = bytearray(small())
    # Replace the 3-byte weight block (at 80: after the 32-byte stream header and the
    # 48-byte cmd_data block) by a 64-byte key; everything after it shifts by 64 - 16.
    external = block(b"weight_data", 64, key.encode().hex(), external=1)
    data[80 : 80 + 48] = external
    v = ep.decode(bytes(data), {key: weights})
    assert v.weight_data == weights and v.external == {"weight_data": key}
    with pytest.raises(PayloadError, match="refers to named data 'abab"):
        ep.decode(bytes(data))
    short = bytearray(small())
    short[80 : 80 + 48] = block(b"weight_data", 3, "616263" + "00" * 13, external=1)
    with pytest.raises(PayloadError, match="3-byte key"):
        ep.decode(bytes(short), {})


def patched(offset: int, raw: bytes) -> bytes:
    data = bytearray(small())
    data[offset : offset + len(raw)] = raw
    return bytes(data)


# Offsets in small(): blocks start at 0, 32, 80, 128, 176, 256, 336 (end 368).
@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "blocks are"),
        (small()[:-16], "not a multiple of 16|cut off"),
        (small()[:-32], "blocks are"),
        (small() + bytes(16), "cut off"),
        (small() + small()[336:], "blocks are"),
        (small()[:-1], "not a multiple of 16"),
        (patched(32, b"cmd_datx"), "blocks are"),
        (patched(0, b"vela_bin_stream!"), "not a NUL-padded string"),
        (patched(40, b"\0x"), "not a NUL-padded string"),
        (patched(52, b"\x02"), "external flag 2"),
        (patched(60, b"\x01"), "reserved bytes"),
        (patched(48, struct.pack("<I", 17)), "padding after the data is not zero|blocks are"),
        (patched(48, struct.pack("<I", 2**31)), "run past the end"),
        (patched(72, b"\x01"), "padding after the data is not zero"),
        (patched(64, b"COPX"), "not a Vela command stream"),
        (patched(144, struct.pack("<I", 3)), "scratch_size block has 3 bytes"),
        (patched(208, struct.pack("<i", 2)), "inputs block has 40 bytes for a count of 2"),
        (patched(288, struct.pack("<i", -1)), "outputs block has 40 bytes for a count of -1"),
        (b"".join([small()[:32], small()[80:128], small()[32:80], small()[128:]]), "blocks are"),
    ],
)
def test_decode_rejects_malformed_payloads(data, message):
    with pytest.raises(PayloadError, match=message):
        ep.decode(data)


def test_decode_rejects_non_empty_stream_markers():
    data = block(b"vela_bin_stream", 1, "01" + "00" * 15) + small()[32:]
    with pytest.raises(PayloadError, match="vela_bin_stream block holds 1 bytes"):
        ep.decode(data)


# small()'s bytes by role, from the offsets above: each block's header is a 16-byte name
# (its unused bytes NUL), uint32 size at +16, the external flag at +20, 11 reserved bytes at
# +21, then the data and its zero padding to 16.
NAME_ENDS = {0: 15, 32: 8, 80: 11, 128: 12, 176: 6, 256: 7, 336: 15}  # block start: name length
DATA = {0: 0, 32: 8, 80: 3, 128: 4, 176: 40, 256: 40, 336: 0}  # block start: data bytes
MUST_BE_ZERO = {
    i
    for start, name_length in NAME_ENDS.items()
    for i in [
        *range(start + name_length, start + 16),
        *range(start + 21, start + 32),
        *range(start + 32 + DATA[start], start + 32 + -(-DATA[start] // 16) * 16),
    ]
}
# Bytes whose every value is valid: the command stream after its b"COP1" magic, the
# weights and the scratch size.
CMD_FREE, WEIGHTS, SCRATCH = range(68, 72), range(112, 115), range(160, 164)
FREE = set(CMD_FREE) | set(WEIGHTS) | set(SCRATCH)


def test_every_truncation_is_a_payload_error():
    data = small()
    for n in range(len(data)):
        with pytest.raises(PayloadError):
            ep.decode(data[:n])


def test_random_flips_decode_exactly_when_only_free_bytes_change():
    """Flips only in free bytes decode to the flipped values; a flip in a NUL, reserved or
    padding byte is a PayloadError; any other flip is a PayloadError or a payload."""
    data = small()
    assert len(data) == 368 and all(data[i] == 0 for i in MUST_BE_ZERO)
    rng = random.Random(7)
    outcomes = {"free": 0, "zero byte": 0, "other error": 0, "other payload": 0}
    for _ in range(3000):
        mutated = bytearray(data)
        flipped = set()
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(mutated))
            mutated[at] ^= 1 << rng.randrange(8)
            flipped.add(at)
        mutated = bytes(mutated)
        if flipped <= FREE:
            v = ep.decode(mutated)
            assert v.cmd_data == b"COP1" + mutated[CMD_FREE.start : CMD_FREE.stop]
            assert v.weight_data == mutated[WEIGHTS.start : WEIGHTS.stop]
            assert v.scratch_size == int.from_bytes(mutated[SCRATCH.start : SCRATCH.stop], "little")
            assert (v.inputs, v.outputs) == ((INPUT,), (OUTPUT,))
            outcomes["free"] += 1
        elif any(mutated[i] for i in MUST_BE_ZERO):
            with pytest.raises(PayloadError):
                ep.decode(mutated)
            outcomes["zero byte"] += 1
        else:
            try:
                ep.decode(mutated)
                outcomes["other payload"] += 1
            except PayloadError as e:
                assert str(e)
                outcomes["other error"] += 1
    assert outcomes["free"] > 0 and outcomes["zero byte"] > 0 and outcomes["other error"] > 0, outcomes


@pytest.mark.parametrize(
    "args, message",
    [
        ((b"XXXX", b"", 0, [], []), "not a Vela command stream"),
        ((b"COP1", b"", -1, [], []), "does not fit in uint32"),
        ((b"COP1", b"", 2**32, [], []), "does not fit in uint32"),
    ],
)
def test_encode_refuses_what_the_runtime_would_reject(args, message):
    with pytest.raises(PayloadError, match=message):
        ep.encode(*args)


def test_io_tensor_needs_six_int32_dimensions():
    with pytest.raises(PayloadError, match="has 4 dimensions"):
        IoTensor((1, 8, 8, 1), 1, 0, 1)
    with pytest.raises(PayloadError, match="offset 2147483648 does not fit"):
        IoTensor((1,) * 6, 1, 2**31, 1)


@pytest.mark.executorch
@pytest.mark.skipif(
    not ET_PYTHON.exists(),
    reason="ExecuTorch 1.5.1 environment .venv-executorch is missing: run ./scripts/executorch_env.sh",
)
def test_encode_from_vela_output_equals_executorch_payload(tmp_path):
    """ExecuTorch's Arm flow keeps Vela's raw output (--intermediates): kiln's encode of that
    output must give exactly the payload ExecuTorch put in its .pte."""
    run = subprocess.run(
        [
            str(ET_PYTHON),
            "-m",
            "executorch.backends.arm.scripts.aot_arm_compiler",
            "--model_name",
            str(FIXTURES / "conv_relu.py"),
            "--delegate",
            "--quantize",
            "--target",
            "ethos-u55-128",
            "--output",
            str(tmp_path / "out"),
            "--intermediates",
            str(tmp_path / "inter"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (pte_path,) = (tmp_path / "out").glob("*.pte")
    f = deserialize(pte_path.read_bytes())
    (delegate,) = f.program.execution_plans[0].delegates
    with np.load(tmp_path / "inter" / "output" / "out_vela.npz", allow_pickle=False) as z:
        ios = {
            kind: [
                IoTensor(shape, size, offset, region)
                for shape, size, offset, region in zip(
                    z[f"{kind}_shape"].tolist(),
                    z[f"{kind}_elem_size"].tolist(),
                    z[f"{kind}_offset"].tolist(),
                    z[f"{kind}_region"].tolist(),
                )
            ]
            for kind in ("input", "output")
        }
        ours = ep.encode(
            z["cmd_data"].tobytes(), z["weight_data"].tobytes(), int(z["scratch_shape"][0]), ios["input"], ios["output"]
        )
    assert ours == f.delegate_payload(delegate)


def test_compiled_for_specs_read_kiln_and_executorch_flags():
    kiln_specs = {ep.MEMORY_MODE_SPEC: "Sram_Only", ep.FAST_SCRATCH_SPEC: "4096"}
    executorch_specs = {
        ep.COMPILE_FLAGS_SPEC: "--output-format=raw --system-config=Ethos_U65_High_End "
        "--memory-mode=Dedicated_Sram_384KB"
    }
    assert ep.compiled_memory_mode(kiln_specs) == "Sram_Only"
    assert ep.compiled_fast_scratch(kiln_specs) == 4096
    assert ep.compiled_memory_mode(executorch_specs) == "Dedicated_Sram_384KB"
    assert ep.compiled_system_config(executorch_specs) == "Ethos_U65_High_End"
    assert ep.compiled_fast_scratch(executorch_specs) is None
    with pytest.raises(ep.PayloadError, match="kiln.fast_scratch_size is '-1', not a byte count"):
        ep.compiled_fast_scratch({ep.FAST_SCRATCH_SPEC: "-1"})
