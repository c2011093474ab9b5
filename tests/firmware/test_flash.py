"""kiln flash (issue 16, item 4): each board's bundle against its vendor's documented format, and
every way it can fail saying what is wrong and what to do.

The formats, as the vendors' own files write them (the expectations below are those files'
facts, not board.toml's):
- MPS3 (Arm's ML evaluation kit, scripts/mps3/sse-300/images.txt): `[IMAGES]`, `TOTALIMAGES: n`,
  per image `IMAGEnADDRESS` (the MCC's address: ITCM 0x0000_0000 <=> MCC 0x0000_0000, secure DDR
  0x7000_0000 <=> MCC 0x0C00_0000), `IMAGEnUPDATE: AUTO`, `IMAGEnFILE: \\SOFTWARE\\name.bin`;
- MPS4 (scripts/mps4/sse-320/images.txt): the same keys with `IMAGEnPORT: 1`, `IMAGEnUPDATE: RAM`
  and the CPU's addresses written as 0x00_1100_0000;
- Alif (the evaluation kit's docs/sections/deployment.md): JSON {NAME: {binary, version,
  mramAddress "0x80008000", cpu_id "M55_HP", flags ["boot"], signed}}, the binary in SETOOLS'
  build/images, the JSON in build/config, then `app-gen-toc -f build/config/X.json` and
  `app-write-mram -p` in the toolkit's folder.
The ELFs are tiny ones made here (a few segments, no sections); pyOCD runs for real, on this
machine without a probe. About 2 s."""

from __future__ import annotations

import errno
import json
import os
import re
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from kiln.errors import FlashError, UsageError
from kiln.firmware import flash

ROOT = Path(__file__).resolve().parents[2]
MPS3_MCC = {0x1000_0000: 0x0000_0000, 0x7000_0000: 0x0C00_0000}  # kiln's itcm (secure alias), ddr
MPS4_ADDRESSES = {0x1100_0000, 0x7000_0000}  # boot ROM, DDR: the CPU's own addresses
CODE, DATA, MODEL = b"\x00\x80\x00\x30" + bytes(range(60)), b"initial .data", b"the .pte" * 5


def make_elf(path: Path, segments: list[tuple[int, int, bytes, int]], machine: int = 40) -> Path:
    """A little-endian ELF32 executable with only program headers: (paddr, vaddr, bytes, memsz)."""
    header_size, ph_size = 52, 32
    offset = header_size + ph_size * len(segments)
    headers, blobs = b"", b""
    for paddr, vaddr, data, memsz in segments:
        headers += struct.pack("<8I", 1, offset + len(blobs), vaddr, paddr, len(data), memsz, 5, 4)
        blobs += data
    ident = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
    path.write_bytes(
        ident
        + struct.pack(
            "<HHIIIIIHHHHHH",
            2,
            machine,
            1,
            segments[0][1] | 1,
            header_size,
            0,
            0x05000400,
            header_size,
            ph_size,
            len(segments),
            40,
            0,
            0,
        )
        + headers
        + blobs
    )
    return path


def corstone_elf(tmp_path: Path, code_base: int) -> Path:
    """Code at the code region, .data's initial values after it (loaded there, run in DTCM at
    0x3000_0000), .bss with no bytes, the .pte in DDR: as kiln's linker script lays them out."""
    return make_elf(
        tmp_path / "runner.elf",
        [
            (code_base, code_base, CODE, len(CODE)),
            (code_base + 0x100, 0x3000_0000, DATA, 0x40),
            (0x3000_0100, 0x3000_0100, b"", 0x200),
            (0x7000_0000, 0x7000_0000, MODEL, len(MODEL)),
        ],
    )


def alif_elf(tmp_path: Path) -> Path:
    return make_elf(
        tmp_path / "alif.elf",
        [(0x8000_8000, 0x8000_8000, CODE, len(CODE)), (0x8000_8200, 0x2000_0000, DATA, len(DATA))],
    )


def drive(tmp_path: Path, folder: str) -> Path:
    """A folder laid out as an MPS board's USB drive: MB/<board>/<image>/images.txt, SOFTWARE/."""
    root = tmp_path / "drive"
    (root / folder).mkdir(parents=True)
    (root / "SOFTWARE").mkdir()
    (root / folder / "images.txt").write_text("TITLE: the board's own\r\n[IMAGES]\r\nTOTALIMAGES: 0\r\n")
    return root


def read_images_txt(path: Path) -> list[dict[str, str]]:
    """images.txt as the MCC reads it: `KEY: value ;comment` lines of the [IMAGES] section, one dict
    per image n < TOTALIMAGES (keys without the IMAGEn prefix). Fails on anything else."""
    text = path.read_bytes().decode("ascii")
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")  # DOS text, as the MCC's own files
    section, fields = None, {}
    for line in text.split("\r\n"):
        line = line.split(";")[0].strip()
        if not line or line.startswith("TITLE:"):
            continue
        if line.startswith("["):
            section = line
            continue
        assert section == "[IMAGES]", line
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    total = int(fields.pop("TOTALIMAGES"))
    assert 1 <= total <= 32
    images = []
    for n in range(total):
        images.append(
            {k.removeprefix(f"IMAGE{n}"): fields.pop(k) for k in list(fields) if re.match(f"IMAGE{n}[A-Z]", k)}
        )
    assert not fields, f"keys of no image: {fields}"
    return images


def software_file(root: Path, value: str) -> Path:
    assert value.startswith("\\SOFTWARE\\"), value
    name = value.removeprefix("\\SOFTWARE\\")
    stem, _, ext = name.partition(".")
    assert re.fullmatch(r"[A-Za-z0-9_]{1,8}", stem) and re.fullmatch(r"[A-Za-z0-9]{1,3}", ext), f"{name}: not 8.3"
    return root / "SOFTWARE" / name


def test_mps3_bundle_on_the_drive(tmp_path):
    root = drive(tmp_path, "MB/HBI0309C/AN552")
    assert flash.flash("mps3-an552", corstone_elf(tmp_path, 0x1000_0000), drive=root, echo=lambda _: None) == 0
    images = read_images_txt(root / "MB/HBI0309C/AN552/images.txt")
    loaded = {}
    for image in images:
        assert set(image) == {"ADDRESS", "UPDATE", "FILE"} and image["UPDATE"] == "AUTO"
        assert re.fullmatch(r"0x[0-9A-Fa-f]{8}", image["ADDRESS"])
        loaded[int(image["ADDRESS"], 16)] = software_file(root, image["FILE"]).read_bytes()
    code = CODE + bytes(0x100 - len(CODE)) + DATA  # .data's initial values where they load
    assert loaded == {MPS3_MCC[0x1000_0000]: code, MPS3_MCC[0x7000_0000]: MODEL}
    assert (root / "MB/HBI0309C/AN552/images.bak").read_text().startswith("TITLE: the board's own")


def test_mps4_bundle_on_the_drive(tmp_path):
    root = drive(tmp_path, "MB/HBI0376B/FI101")
    flash.flash("mps4-corstone320", corstone_elf(tmp_path, 0x1100_0000), drive=root, echo=lambda _: None)
    images = read_images_txt(root / "MB/HBI0376B/FI101/images.txt")
    addresses = set()
    for image in images:
        assert set(image) == {"PORT", "ADDRESS", "UPDATE", "FILE"} and (image["PORT"], image["UPDATE"]) == ("1", "RAM")
        assert re.fullmatch(r"0x[0-9A-F]{2}_[0-9A-F]{4}_[0-9A-F]{4}", image["ADDRESS"])
        addresses.add(int(image["ADDRESS"].replace("_", ""), 16))
        assert software_file(root, image["FILE"]).is_file()
    assert addresses == MPS4_ADDRESSES


def check_setools_config(config: Path, cpu_id: str) -> Path:
    """The JSON as Alif documents it; returns the binary it names (in build/images beside build/config)."""
    entries = json.loads(config.read_text())
    assert config.parent.name == "config" and config.parent.parent.name == "build"
    ((name, entry),) = entries.items()
    assert set(entry) == {"binary", "version", "mramAddress", "cpu_id", "flags", "signed"}
    assert (entry["mramAddress"], entry["cpu_id"], entry["flags"], entry["signed"]) == (
        "0x80008000",
        cpu_id,
        ["boot"],
        False,
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+", entry["version"])
    return config.parent.parent / "images" / entry["binary"]


@pytest.mark.parametrize("board, cpu_id", [("alif-e7-hp", "M55_HP"), ("alif-e7-he", "M55_HE"), ("alif-e8", "M55_HP")])
def test_alif_bundle_and_the_commands_without_the_toolkit(tmp_path, monkeypatch, board, cpu_id):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    lines = []
    flash.flash(board, alif_elf(tmp_path), output=tmp_path / "out", echo=lines.append)
    (config,) = (tmp_path / "out" / "build" / "config").glob("*.json")
    binary = check_setools_config(config, cpu_id)
    assert binary.read_bytes() == CODE + bytes(0x200 - len(CODE)) + DATA
    printed = "\n".join(lines)
    assert f"./app-gen-toc -f build/config/{config.name} && ./app-write-mram -p" in printed
    assert "not on PATH" in printed


def test_alif_runs_the_toolkit_found_on_path(tmp_path, monkeypatch):
    setools = tmp_path / "setools"
    setools.mkdir()
    log = tmp_path / "log"
    for tool in flash.SETOOLS_TOOLS:
        (setools / tool).write_text(f'#!/bin/sh\necho "{tool} $* in $(pwd)" >> {log}\n')
        (setools / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{setools}{os.pathsep}{os.environ['PATH']}")
    assert flash.flash("alif-e7-hp", alif_elf(tmp_path), echo=lambda _: None) == 0
    config = setools / "build" / "config" / "alif-alif-e7-hp.json"
    assert check_setools_config(config, "M55_HP").is_file()
    assert log.read_text().splitlines() == [
        f"app-gen-toc -f build/config/{config.name} in {setools}",
        f"app-write-mram -p in {setools}",
    ]


def test_bad_input_says_what_is_wrong(tmp_path, monkeypatch):
    mps3 = corstone_elf(tmp_path, 0x1000_0000)
    with pytest.raises(UsageError, match="unknown board 'mps9'"):
        flash.flash("mps9", mps3)
    with pytest.raises(
        UsageError,
        match=r"outside every memory region of alif-e7-hp: it was built for another "
        r"board \(it fits corstone-300, corstone-320, mps3-an552, mps4-corstone320:",
    ):
        flash.flash("alif-e7-hp", mps3)
    with pytest.raises(
        UsageError,
        match=r"another board \(it fits alif-e7-he, alif-e7-hp, alif-e8, mps2-an505: flash it with one of those as "
        r"--board\); for mps3-an552, build it with kiln build --board mps3-an552",
    ):
        flash.flash("mps3-an552", alif_elf(tmp_path), drive=tmp_path)
    with pytest.raises(UsageError, match="not an ELF file"):
        flash.flash("mps3-an552", tmp_path.joinpath("x.elf").write_bytes(b"MZ") and tmp_path / "x.elf", drive=tmp_path)
    with pytest.raises(UsageError, match="a 32-bit EM_386 ELF, not Arm firmware"):
        flash.flash("mps3-an552", make_elf(tmp_path / "x86.elf", [(0x1000_0000, 0x1000_0000, CODE, 64)], machine=3))
    with pytest.raises(UsageError, match="give --drive DIR"):
        flash.flash("mps3-an552", mps3)
    with pytest.raises(UsageError, match="--drive .*/nowhere: no such folder; connect the mps3-an552's USB port"):
        flash.flash("mps3-an552", mps3, drive=tmp_path / "nowhere")
    with pytest.raises(UsageError, match=r"--drive does not apply to alif-e7-hp \(--drive is for mps-drive\)"):
        flash.flash("alif-e7-hp", alif_elf(tmp_path), drive=tmp_path)
    with pytest.raises(UsageError, match=r"--pack does not apply to mps3-an552 \(--pack is for probe\)"):
        flash.flash("mps3-an552", mps3, drive=tmp_path, pack=tmp_path)
    sram = make_elf(
        tmp_path / "sram.elf", [(0x1000_0000, 0x1000_0000, CODE, 64), (0x3100_0000, 0x3100_0000, MODEL, 40)]
    )
    with pytest.raises(UsageError, match="into region sram, which the board's images.txt cannot load .*Sram_Only"):
        flash.flash("mps3-an552", sram, drive=drive(tmp_path / "3", "MB/HBI0309C/AN552"))
    mps4_drive = drive(tmp_path / "4", "MB/HBI0376B/FI101")
    with pytest.raises(UsageError, match="no MB/HBI0309C/AN552 folder, so this is not the drive of a mps3-an552"):
        flash.flash("mps3-an552", mps3, drive=mps4_drive)


def test_a_read_only_drive(tmp_path, monkeypatch):
    root = drive(tmp_path, "MB/HBI0309C/AN552")
    elf = corstone_elf(tmp_path, 0x1000_0000)

    def refused(self, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "write_bytes", refused)  # as a write-protected drive's file system answers
    with pytest.raises(FlashError, match="is read-only .*: remount it writable"):
        flash.flash("mps3-an552", elf, drive=root)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder without write permission")
def test_a_drive_without_write_permission(tmp_path):
    root = drive(tmp_path, "MB/HBI0309C/AN552")
    elf = corstone_elf(tmp_path, 0x1000_0000)
    for folder in (root / "SOFTWARE", root):
        folder.chmod(0o555)
    try:
        with pytest.raises(FlashError, match="is read-only"):
            flash.flash("mps3-an552", elf, drive=root)
    finally:
        for folder in (root, root / "SOFTWARE"):
            folder.chmod(0o755)


def make_pack(path: Path, device: str) -> Path:
    """A CMSIS pack (a zip holding a .pdsc) describing one Cortex-M55 device."""
    pdsc = f"""<?xml version="1.0" encoding="UTF-8"?>
<package schemaVersion="1.7.7"><vendor>ARM</vendor><name>Test</name><description>test</description>
<releases><release version="1.0.0">test</release></releases>
<devices><family Dfamily="SSE-300" Dvendor="ARM:82"><device Dname="{device}">
<processor Dcore="Cortex-M55" Dfpu="DP_FPU" Dmpu="MPU" Dendian="Little-endian" Dclock="32000000"/>
<memory name="ITCM" access="rx" start="0x10000000" size="0x80000" default="1" startup="1"/>
</device></family></devices></package>"""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ARM.Test.pdsc", pdsc)
    return path


def test_probe_without_a_pack_then_without_a_probe(tmp_path, monkeypatch):
    pytest.importorskip("pyocd")
    elf = corstone_elf(tmp_path, 0x1000_0000)
    monkeypatch.setattr(flash, "installed_pack_targets", lambda: set())  # whatever this machine installed
    with pytest.raises(
        FlashError,
        match=r"no CMSIS pack for ARM::SSE-300-MPS3 \(no installed pack describes it\): "
        r"install ARM::V2M_MPS3_SSE_300_BSP@1.5.0 with `pyocd pack install "
        r"sse-300-mps3`, or pass its .pack file as --pack",
    ):
        flash.flash("mps3-an552", elf, probe=True)
    with pytest.raises(FlashError, match="--pack .* does not describe it"):
        flash.flash("mps3-an552", elf, probe=True, pack=make_pack(tmp_path / "other.pack", "SSE-310-MPS3"))
    if flash.connected_probes():
        pytest.skip("a debug probe is attached to this machine")
    with pytest.raises(FlashError, match="no debug probe attached: connect the mps3-an552's debug USB"):
        flash.flash("mps3-an552", elf, probe=True, pack=make_pack(tmp_path / "mps3.pack", "SSE-300-MPS3"))
    with pytest.raises(UsageError, match="board alif-e8 names no CMSIS device"):
        flash.flash("alif-e8", alif_elf(tmp_path), probe=True)


def test_flash_sh_reports_one_line(tmp_path):
    """The script and the command: a missing pack is one line on standard error and status 1."""
    pytest.importorskip("pyocd")
    result = subprocess.run(
        [
            str(ROOT / "scripts" / "flash.sh"),
            "--board=mps3-an552",
            f"--elf={corstone_elf(tmp_path, 0x1000_0000)}",
            "--probe",
            f"--pack={make_pack(tmp_path / 'other.pack', 'SSE-310-MPS3')}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"flash.sh: error: no CMSIS pack for ARM::SSE-300-MPS3 (--pack "
        f"{tmp_path / 'other.pack'} does not describe it): install "
        "ARM::V2M_MPS3_SSE_300_BSP@1.5.0 with `pyocd pack install sse-300-mps3`, "
        "or pass its .pack file as --pack"
    ]
