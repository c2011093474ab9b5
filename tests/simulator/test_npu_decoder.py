"""The command decoder and the COP1 container, checked against Vela's own listing of the
stream it wrote (--verbose-register-command-stream) and against hand-built payloads."""

from __future__ import annotations

import re
import struct
import subprocess

import numpy as np
import pytest

from kiln.lower.vela import vela_command
from kiln.simulator.npu import Cop1Error, parse_cop1
from kiln.simulator.npu.commands import CommandError, as_words, decode
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.u55.commands import U55_COMMANDS
from tests.simulator import helpers

LISTING = re.compile(r"^0x([0-9a-f]{6}):\s+(?:([0-9a-f]{8})\s+)?([0-9a-f]{4}) ([0-9a-f]{4}) - (\w+)")


def _vela_listing(tmp_path, tosa: bytes, target: str):
    source = tmp_path / "g.tosa"
    source.write_bytes(tosa)
    run = subprocess.run(
        vela_command()
        + [
            "--accelerator-config",
            target,
            "--system-config",
            helpers.system_config(target),
            "--memory-mode",
            "Shared_Sram",
            "--output-format",
            "raw",
            "--output-dir",
            str(tmp_path),
            str(source),
            "--verbose-register-command-stream",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in run.stdout.splitlines():
        m = LISTING.match(line)
        if m:
            offset, payload, param, code, name = m.groups()
            rows.append((int(offset, 16) // 4, name, int(param, 16), None if payload is None else int(payload, 16)))
    cmd_data = np.load(tmp_path / "g_vela.npz")["cmd_data"].item()
    return rows, bytes(cmd_data)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-512"])
def test_decoder_matches_vela_listing(tmp_path, target):
    graph = helpers.build_batch(7, range(8))
    rows, cmd_data = _vela_listing(tmp_path, graph.serialize(), target)
    assert len(rows) > 50
    cop1 = parse_cop1(cmd_data)
    assert cop1.config_word == config_for(target).config_register
    decoded = [
        (c.index, c.name if c.is_operation else f"NPU_SET_{c.name}", c.param, c.payload)
        for c in decode(cop1.stream, U55_COMMANDS)
    ]
    assert decoded == rows


def _payload(words):
    return struct.pack(f"<{len(words)}I", *words)


def test_cop1_hand_built():
    stream = [0x0001_010F, 0x0000_4000, 0x1234, 0xFFFF_0000]
    words = [0x3150_4F43, 0x01, 0x1111_0000, 0x2222_0000, 0x05, 0x0004_0002, *stream]
    cop1 = parse_cop1(_payload(words))
    assert (cop1.config_word, cop1.id_word) == (0x1111_0000, 0x2222_0000)
    assert cop1.stream.tolist() == stream


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"COP2" + bytes(12), "not a COP1 payload"),
        (b"COP1" + bytes(3), "multiple of 4"),
        (_payload([0x3150_4F43, 0x01, 0x1]), "truncated"),
        (_payload([0x3150_4F43, 0x01, 1, 2, 0x0009_0002, 0]), "claims 9 words"),
        (_payload([0x3150_4F43, 0x01, 1, 2]), "no command stream"),
        (_payload([0x3150_4F43, 0x0001_0002, 0]), "no config action"),
        (_payload([0x3150_4F43, 0x77]), "unknown COP1 driver action"),
    ],
)
def test_cop1_malformed(payload, message):
    with pytest.raises(Cop1Error, match=message):
        parse_cop1(payload)
    assert issubclass(Cop1Error, ValueError)


@pytest.mark.parametrize(
    "words, message",
    [
        ([0x0000_0007], "unknown opcode 0x007"),
        ([0x0000_4099], "unknown opcode 0x099 with payload"),
        ([0x0000_4000], "missing its payload"),
        ([0x0000_8000], "unsupported payload size 2"),
        ([0x0000_0400], "reserved bits"),
    ],
)
def test_decoder_rejects(words, message):
    with pytest.raises(CommandError, match=message):
        list(decode(np.array(words, np.uint32), U55_COMMANDS))


def test_stream_as_bytes():
    assert as_words(struct.pack("<2I", 0x0001_010F, 0xFFFF_0000)).tolist() == [0x0001_010F, 0xFFFF_0000]
    with pytest.raises(CommandError):
        as_words(b"\x00\x01\x02")
