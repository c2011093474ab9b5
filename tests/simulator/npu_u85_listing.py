"""Vela's own disassembly of a command stream (`vela --verbose-register-command-stream`),
parsed: an oracle for kiln's Ethos-U85 decoder that shares no code with it."""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kiln.lower.vela import vela_command

# "0x000004: 00000001 2000 4025 - NPU_SET_IFM_SCALE    8192, shift = 0, dbl_rnd = 0, ..."
# (a cmd0 line has blanks where the payload would be)
_LINE = re.compile(
    r"^0x([0-9a-f]{6}): (?:([0-9a-f]{8})|\s{8}) ([0-9a-f]{4}) ([0-9a-f]{4}) - (NPU_\w+)\s+(\d+)(?:, (.*))?$"
)


@dataclass(frozen=True)
class Listed:
    offset: int  # bytes from the start of the stream
    payload: int | None
    param: int
    code: int  # the header's low 16 bits
    name: str  # as Vela prints it, e.g. NPU_SET_IFM_SCALE
    fields: dict[str, str]

    @property
    def words(self) -> list[int]:
        header = (self.param << 16) | self.code
        return [header] if self.payload is None else [header, self.payload]


def parse(text: str) -> list[Listed]:
    listed = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        offset, payload, param, code, name, _, fields = m.groups()
        pairs = dict(item.split(" = ", 1) for item in (fields or "").split(", ") if " = " in item)
        listed.append(
            Listed(
                int(offset, 16),
                None if payload is None else int(payload, 16),
                int(param, 16),
                int(code, 16),
                name,
                pairs,
            )
        )
    return listed


def listing(tosa: bytes, target: str, system_config: str, memory_mode: str) -> list[Listed]:
    with tempfile.TemporaryDirectory(prefix="kiln-vela-listing-") as tmp:
        source = Path(tmp) / "listing.tosa"
        source.write_bytes(tosa)
        run = subprocess.run(
            vela_command()
            + [
                "--accelerator-config",
                target,
                "--system-config",
                system_config,
                "--memory-mode",
                memory_mode,
                "--output-format",
                "raw",
                "--output-dir",
                tmp,
                "--verbose-register-command-stream",
                str(source),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
    return parse(run.stdout)
