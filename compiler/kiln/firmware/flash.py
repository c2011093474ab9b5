"""`kiln flash`: a firmware ELF onto a board, the way its vendor documents (board.toml's [flash]
and [cmsis] hold each board's facts).

    mps-drive      MPS3/MPS4: one binary per memory region the ELF loads, copied into SOFTWARE/
                   on the board's USB drive, and images.txt (the MCC's list of images) rewritten
                   to name them (`write_drive`)
    alif-setools   Alif Ensemble: the MRAM image and the Security Toolkit's JSON configuration
                   (`write_setools`); app-gen-toc and app-write-mram run when found, else kiln
                   prints the exact commands
    pyOCD          any board with a [cmsis] device, a debug probe and the device's CMSIS pack
                   (`flash_probe`): the ELF through `pyocd flash`

An image is what the ELF's loadable segments put in one memory region of the board, by load
address (LMA: .data's initial values load in the code region), gaps zero-filled as objcopy
-O binary fills them. A segment outside the board's memory means the ELF was built for another
board, and is refused (`images`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kiln import boards
from kiln.errors import FlashError, ToolMissingError, UsageError

EM_ARM = 40
PT_LOAD = 1
SETOOLS_TOOLS = ("app-gen-toc", "app-write-mram")  # Alif's Security Toolkit, in its own folder
SETOOLS_ENTRY = "KILN_APP"  # the ATOC entry kiln's configuration names
SETOOLS_VERSION = "1.0.0"  # the image version the ATOC records (Alif's examples use 1.0.0)
PYOCD_INSTALL = "./scripts/setup.sh installs it (or: pip install 'kiln[flash]')"


@dataclass(frozen=True)
class Image:
    """The bytes the ELF loads into one memory region, from `address` (a CPU address)."""

    region: str
    address: int
    data: bytes

    @property
    def file_name(self) -> str:
        return f"{self.region}.bin"  # a region name is [a-z][a-z0-9_]*: 8.3 when it has <= 8 characters


def _segments(elf: Path) -> list[tuple[int, bytes]]:
    """(load address, file bytes) of every PT_LOAD segment with bytes in the file."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    if not elf.is_file():
        raise UsageError(f"--elf {elf}: no such file (kiln build prints the ELF it built)")
    try:
        with elf.open("rb") as f:
            e = ELFFile(f)
            if e["e_machine"] != "EM_ARM" or e.elfclass != 32:
                raise UsageError(
                    f"--elf {elf}: a {e.elfclass}-bit {e['e_machine']} ELF, not Arm firmware; "
                    "give the ELF kiln build printed"
                )
            return [
                (s["p_paddr"], s.data()) for s in e.iter_segments() if s["p_type"] == "PT_LOAD" and s["p_filesz"] > 0
            ]
    except ELFError as error:
        raise UsageError(f"--elf {elf}: not an ELF file ({error})") from None


def _region_of(board: boards.Board, address: int, size: int) -> boards.MemoryRegion | None:
    return next((r for r in board.memory if r.base <= address and address + size <= r.end), None)


def images(elf: Path, board: boards.Board) -> list[Image]:
    """The ELF's loadable bytes as one Image per memory region of `board`, in address order.
    A UsageError when a segment lies in none of the board's regions (naming the boards whose
    memory holds the whole ELF), or when nothing loads into the board's code region."""
    segments = _segments(elf)
    by_region: dict[str, list[tuple[int, bytes]]] = {}
    for address, data in segments:
        region = _region_of(board, address, len(data))
        if region is None:
            fits = [b for b in boards.board_names() if all(_region_of(boards.load(b), a, len(d)) for a, d in segments)]
            where = f" (it fits {', '.join(fits)}: flash it with one of those as --board)" if fits else ""
            raise UsageError(
                f"--elf {elf}: loads {len(data):,} bytes at {address:#010x}, outside every memory region "
                f"of {board.name}: it was built for another board{where}; for {board.name}, build it "
                f"with kiln build --board {board.name}"
            )
        by_region.setdefault(region.name, []).append((address, data))
    code = board.region_for("code").name
    if code not in by_region:
        raise UsageError(
            f"--elf {elf}: loads nothing into {board.name}'s code region {code} (its vector table "
            "and code): not firmware for this board"
        )
    out = []
    for name, parts in by_region.items():
        start = min(a for a, _ in parts)
        blob = bytearray(max(a + len(d) for a, d in parts) - start)
        for address, data in parts:
            blob[address - start : address - start + len(data)] = data
        out.append(Image(name, start, bytes(blob)))
    return sorted(out, key=lambda i: i.address)


def _flash(board: boards.Board, method: str) -> boards.Flash:
    if board.flash is None or board.flash.method != method:
        raise UsageError(f"board {board.name} is not flashed through {method}")
    return board.flash


# --- MPS3 / MPS4: the board's USB drive -----------------------------------------------------------


def _address(value: int, digits: int) -> str:
    """An images.txt address: 8 hex digits (0x0C000000), or more in groups of four from the
    right (10: 0x00_1100_0000), as the vendor's files for each board write them."""
    text = f"{value:0{digits}X}"
    if digits == 8:
        return f"0x{text}"
    groups = [text[max(0, i - 4) : i] for i in range(len(text), 0, -4)][::-1]
    return "0x" + "_".join(groups)


def images_txt(board: boards.Board, imgs: list[Image]) -> str:
    """The images.txt that loads `imgs` from the drive's SOFTWARE folder: the [IMAGES] section
    with TOTALIMAGES and, per image n, IMAGEnPORT (where the board has one), IMAGEnADDRESS (the
    region's address as the MCC names it: board.toml's flash.load_address), IMAGEnUPDATE and
    IMAGEnFILE (\\SOFTWARE\\<region>.bin)."""
    flash = _flash(board, "mps-drive")
    loads = dict(flash.load_address)
    lines = [
        f"TITLE: {board.summary}: images written by kiln flash",
        "",
        "[IMAGES]",
        f"TOTALIMAGES: {len(imgs)}                  ;Number of Images (Max: 32)",
        "",
    ]
    for n, image in enumerate(imgs):
        if image.region not in loads:
            raise UsageError(
                f"{board.name}: the ELF loads bytes into region {image.region}, which the board's "
                f"images.txt cannot load (it loads {', '.join(loads)}: board.toml's flash.load_address); "
                f"a .pte compiled for Sram_Only lies there: build for {board.name}'s default memory mode"
            )
        region = next(r for r in board.memory if r.name == image.region)
        if len(image.file_name) > 12:
            raise UsageError(f"{board.name}: region {image.region}'s image name {image.file_name} is no 8.3 file name")
        if flash.port is not None:
            lines.append(f"IMAGE{n}PORT: {flash.port}")
        lines += [
            f"IMAGE{n}ADDRESS: {_address(loads[image.region] + image.address - region.base, flash.address_digits)}"
            f"  ; {image.region} at {image.address:#010x}",
            f"IMAGE{n}UPDATE: {flash.update}",
            f"IMAGE{n}FILE: \\SOFTWARE\\{image.file_name}",
            "",
        ]
    return "\r\n".join(lines)  # the MCC's files are DOS text


def write_drive(board: boards.Board, imgs: list[Image], drive: Path) -> list[Path]:
    """Writes each image into `drive`/SOFTWARE and rewrites the board's images.txt on it (the
    one it had stays beside it as images.bak, once). `drive` must be the board's mounted USB
    drive: a UsageError when it is missing or lacks the board's MB folder, a FlashError when it
    is read-only. Returns the files written."""
    flash = _flash(board, "mps-drive")
    if not drive.is_dir():
        raise UsageError(
            f"--drive {drive}: no such folder; connect the {board.name}'s USB port, power it on and "
            "give the folder its drive is mounted at"
        )
    listing = drive / flash.images_txt
    if not listing.parent.is_dir():
        raise UsageError(
            f"--drive {drive}: no {flash.images_txt.rsplit('/', 1)[0]} folder, so this is not the drive "
            f"of a {board.name} ({board.summary}); check --board and the board's FPGA image"
        )
    read_only = bool(os.statvfs(drive).f_flag & os.ST_RDONLY)
    written = []
    try:
        if read_only:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(drive))
        software = drive / "SOFTWARE"
        software.mkdir(exist_ok=True)
        for image in imgs:
            (software / image.file_name).write_bytes(image.data)
            written.append(software / image.file_name)
        backup = listing.with_suffix(".bak")
        if listing.is_file() and not backup.exists():
            shutil.copyfile(listing, backup)
        listing.write_bytes(images_txt(board, imgs).encode("ascii"))
        written.append(listing)
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise FlashError(
            f"--drive {drive} is read-only ({error.strerror}): remount it writable (the board's USB "
            "drive mounts read-write unless write-protected) and run kiln flash again"
        ) from None
    return written


# --- Alif: the Security Toolkit ----------------------------------------------------------------


def setools_config(board: boards.Board, image: Image, binary: str) -> dict:
    """The Security Toolkit's JSON configuration booting `binary` (in its build/images) from MRAM
    at the image's address on the board's core, as Alif's evaluation kit documents it."""
    flash = _flash(board, "alif-setools")
    return {
        SETOOLS_ENTRY: {
            "binary": binary,
            "version": SETOOLS_VERSION,
            "mramAddress": f"{image.address:#010x}",
            "cpu_id": flash.cpu_id,
            "flags": ["boot"],
            "signed": False,
        }
    }


def setools_commands(config_name: str) -> list[list[str]]:
    """What runs in the Security Toolkit's folder: the table of contents from the configuration
    in build/config, then MRAM written over the SE-UART (-p pads the images as the tool needs)."""
    return [["./app-gen-toc", "-f", f"build/config/{config_name}"], ["./app-write-mram", "-p"]]


def write_setools(board: boards.Board, imgs: list[Image], root: Path, name: str) -> tuple[Path, Path]:
    """Writes the MRAM image as root/build/images/NAME.bin and its configuration as
    root/build/config/NAME.json (the Security Toolkit's layout). A UsageError when the ELF
    loads anything outside MRAM (the code region): the toolkit writes MRAM only."""
    code = board.region_for("code").name
    others = [i.region for i in imgs if i.region != code]
    if others:
        raise UsageError(
            f"{board.name}: the ELF loads bytes into {', '.join(others)}; Alif's Security Toolkit "
            f"writes only the image in {code}"
        )
    image = imgs[0]
    binary, config = root / "build" / "images" / f"{name}.bin", root / "build" / "config" / f"{name}.json"
    for path in (binary, config):
        path.parent.mkdir(parents=True, exist_ok=True)
    binary.write_bytes(image.data)
    config.write_text(json.dumps(setools_config(board, image, binary.name), indent=4) + "\n")
    return binary, config


def find_setools(given: Path | None) -> Path | None:
    """The Security Toolkit's folder: --setools, else the folder of app-write-mram on PATH."""
    if given is not None:
        if not all((given / tool).exists() for tool in SETOOLS_TOOLS):
            raise UsageError(
                f"--setools {given}: no {' or '.join(SETOOLS_TOOLS)} there; give the folder Alif's "
                "Security Toolkit was unpacked into"
            )
        return given
    found = shutil.which(SETOOLS_TOOLS[-1])
    return Path(found).resolve().parent if found else None


# --- pyOCD: a debug probe and the device's CMSIS pack ---------------------------------------------


def _pyocd():
    try:
        import pyocd  # noqa: F401 (pinned as kiln's "flash" extra)
    except ImportError:
        raise ToolMissingError(f"pyOCD is not installed; {PYOCD_INSTALL}") from None


def _pack_targets(pack: Path | None) -> set[str]:
    """pyOCD's target names for devices in `pack` (a .pack file) or, without it, in the packs
    `pyocd pack install` installed, and pyOCD's built-in targets."""
    from pyocd.target import TARGET

    names = set(TARGET)
    if pack is not None:
        from pyocd.target.pack.cmsis_pack import CmsisPack, MalformedCmsisPackError

        if not pack.is_file():
            raise UsageError(f"--pack {pack}: no such file (a CMSIS pack, .pack, as Arm or the vendor ships it)")
        try:
            names |= {d.part_number.lower() for d in CmsisPack(str(pack)).devices}
        except (MalformedCmsisPackError, OSError, ValueError) as error:
            raise UsageError(f"--pack {pack}: not a CMSIS pack ({error})") from None
    else:
        names |= installed_pack_targets()
    return names


def installed_pack_targets() -> set[str]:
    """pyOCD's target names from the packs installed with `pyocd pack install`."""
    from pyocd.target.pack.pack_target import ManagedPacks

    return {d.part_number.lower() for d in ManagedPacks.get_installed_targets()}


def connected_probes() -> list:
    from pyocd.core.helpers import ConnectHelper

    return ConnectHelper.get_all_connected_probes(blocking=False, print_wait_message=False)


def pyocd_command(board: boards.Board, elf: Path, pack: Path | None) -> list[str]:
    command = [sys.executable, "-m", "pyocd", "flash", "--no-wait", "-t", board.cmsis.pyocd_target]
    return command + (["--pack", str(pack)] if pack is not None else []) + [str(elf)]


def flash_probe(board: boards.Board, elf: Path, pack: Path | None, echo=print) -> int:
    """Flashes the ELF through pyOCD: first that a pack (--pack, or one installed) describes the
    board's CMSIS device, then that a debug probe is attached; each missing one is a FlashError
    saying what to do. Returns pyocd flash's exit status."""
    if board.cmsis is None:
        raise UsageError(
            f"board {board.name} names no CMSIS device ([cmsis] in its board.toml), so pyOCD cannot "
            "flash it; flash it the board's own way (kiln flash without --probe)"
        )
    _pyocd()
    images(elf, board)  # the ELF is this board's
    target = board.cmsis.pyocd_target
    if target not in _pack_targets(pack):
        where = f"--pack {pack} does not describe it" if pack else "no installed pack describes it"
        raise FlashError(
            f"no CMSIS pack for {board.cmsis.device} ({where}): install {board.cmsis.pack} with "
            f"`pyocd pack install {target}`, or pass its .pack file as --pack"
        )
    if not connected_probes():
        raise FlashError(
            f"no debug probe attached: connect the {board.name}'s debug USB (CMSIS-DAP, J-Link or "
            "ST-Link), check `pyocd list` shows it, and run kiln flash again"
        )
    command = pyocd_command(board, elf, pack)
    echo(" ".join(command))
    return subprocess.run(command).returncode


# --- kiln flash --------------------------------------------------------------------------------


def flash(
    board_name: str,
    elf: Path,
    drive: Path | None = None,
    probe: bool = False,
    pack: Path | None = None,
    setools: Path | None = None,
    output: Path | None = None,
    echo=print,
) -> int:
    """`kiln flash`: the ELF onto board `board_name`, by --probe (pyOCD) or the board's [flash]
    method; returns the exit status (0, or the vendor tool's)."""
    board = boards.load(board_name)
    method = "probe" if probe else board.flash.method if board.flash else None
    for option, given, methods in (
        ("--drive", drive, ("mps-drive",)),
        ("--pack", pack, ("probe",)),
        ("--setools", setools, ("alif-setools",)),
        ("--output", output, ("alif-setools",)),
    ):
        if given is not None and method not in methods:
            raise UsageError(
                f"{option} does not apply to {board.name}"
                + (" with --probe" if probe else "")
                + f" ({option} is for {' or '.join(methods)})"
            )
    if probe:
        return flash_probe(board, elf, pack, echo)
    if board.flash is None:
        raise UsageError(
            f"board {board.name} has no [flash] in its board.toml: kiln cannot put images on it "
            "(try --probe with a debug probe)"
        )
    imgs = images(elf, board)
    if board.flash.method == "mps-drive":
        if drive is None:
            raise UsageError(
                f"{board.name} is flashed through its USB drive: give --drive DIR, the folder it is mounted at"
            )
        for path in write_drive(board, imgs, drive):
            echo(f"wrote {path}")
        echo(f"power-cycle the {board.name} (or press its reset button): the MCC loads the images at boot")
        return 0
    root = find_setools(setools)
    name = f"{elf.stem}-{board.name}"
    bundle = root if root is not None else (output or elf.parent / f"{name}-setools")
    binary, config = write_setools(board, imgs, bundle, name)
    echo(f"wrote {binary}\nwrote {config}")
    commands = setools_commands(config.name)
    if root is None:
        echo(
            f"Alif's Security Toolkit ({', '.join(SETOOLS_TOOLS)}) is not on PATH; with the board's SE-UART "
            "connected, run:"
        )
        echo(f"  cp {binary} SETOOLS/build/images/ && cp {config} SETOOLS/build/config/")
        echo("  cd SETOOLS && " + " && ".join(" ".join(c) for c in commands))
        return 0
    for command in commands:
        echo(f"{root}$ {' '.join(command)}")
        status = subprocess.run(command, cwd=root).returncode
        if status != 0:
            raise FlashError(
                f"{command[0]} exited with status {status} in {root}; its output is above "
                "(is the board's SE-UART connected and the device chosen with tools-config?)"
            )
    return 0
