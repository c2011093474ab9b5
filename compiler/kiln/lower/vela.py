"""Runs Arm's Vela on a TOSA graph and reads what it writes.

Vela runs as a process of its own (`vela ... --output-format raw`, forked by kiln's
Vela process, kiln.lower.vela_process), so a crash in its C++ core is reported as an
error rather than taking kiln down. Its raw output is `<name>_vela.npz` (command stream,
weights, scratch and I/O placement) and `<name>_summary_<system config>.csv` (the
performance estimate). Every run of Vela in kiln goes through `run`, the compile's
(compile_tosa) and the profile's (with its debug database) alike.
"""

from __future__ import annotations

import csv
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln.errors import ToolMissingError, VelaError, VelaRefusal
from kiln.lower.ethosu_payload import IoTensor
from kiln.lower.vela_process import VelaProcess, installed_vela

_PROCESS = VelaProcess()  # the process's one server, started at its first run of Vela


@dataclass(frozen=True)
class VelaResult:
    cmd_data: bytes  # the COP1 driver payload
    weight_data: bytes  # region 0, read only
    scratch_size: int  # region 1, bytes; holds the inputs and outputs
    fast_scratch_size: int  # region 2, bytes (Dedicated_Sram only)
    inputs: tuple[IoTensor, ...]
    outputs: tuple[IoTensor, ...]
    npu_cycles: int  # Vela's estimate of the NPU's own cycles ("NPU cycles")
    total_cycles: int  # ... with the memory accesses the NPU waits for ("Total cycles")
    inference_s: float  # total_cycles at the system config's clock (Vela's "inference time")
    macs: int
    sram_bytes: int  # Vela's "Total SRAM used"
    summary: dict  # every field of Vela's summary CSV

    @property
    def clock_hz(self) -> float:
        """The NPU clock of the system config Vela compiled for (its core_clock)."""
        return float(self.summary["core_clock"])


def vela_command() -> list[str]:
    exe = installed_vela()
    if exe.exists():
        return [str(exe)]
    found = shutil.which("vela")
    if found is None:
        raise ToolMissingError("Vela is not installed; run ./scripts/setup.sh")
    return [found]


@dataclass(frozen=True)
class VelaRun:
    """One run of Vela: its raw output read, and the other files asked of it."""

    result: VelaResult
    files: dict[str, bytes]  # by file name, as Vela wrote them into its output folder


def run(
    network: bytes,
    filename: str,
    accelerator: str,
    system_config: str,
    memory_mode: str,
    options: tuple[str, ...] = (),
    files: tuple[str, ...] = (),
    keep_dir: Path | None = None,
    timeout_s: float = 600,
) -> VelaRun:
    """Vela run on `network` (a TOSA or TFLite flatbuffer, written as `filename`: its suffix tells
    Vela which) for `accelerator` (e.g. "ethos-u55-128"), with `options` added to its command
    line (e.g. "--enable-debug-db"); returns its raw output read and the bytes of `files`, names
    of other files it writes into its output folder. The folder is `keep_dir` (kept, with the
    network and Vela's log, <name>.vela.log) or a temporary one. A VelaRefusal when Vela fails
    (its last error line), a VelaError when it times out or does not write a file asked of it."""
    name = Path(filename).stem
    with tempfile.TemporaryDirectory(prefix="kiln-vela-") as tmp:
        work = Path(keep_dir) if keep_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        source = work / filename
        source.write_bytes(network)
        command = vela_command() + [
            "--accelerator-config",
            accelerator,
            "--system-config",
            system_config,
            "--memory-mode",
            memory_mode,
            "--output-format",
            "raw",
            "--output-dir",
            str(work),
            *options,
            str(source),
        ]
        log = work / f"{name}.vela.log"
        try:
            returncode = _PROCESS.run(command, log, timeout_s)
        except OSError as error:
            raise VelaError(f"Vela could not be run on {name}: {error}") from None
        if returncode is None:
            raise VelaError(f"Vela did not finish compiling {name} within {timeout_s:.0f} s")
        if returncode != 0:
            reason = failure_reason(returncode, log.read_text(errors="replace"))
            given = f" with {' '.join(options)}" if options else ""
            raise VelaRefusal(f"Vela failed on {name} for {accelerator}{given}: {reason}", reason)
        result = _read(work, name, system_config)
        missing = [f for f in files if not (work / f).is_file()]
        if missing:
            raise VelaError(f"Vela wrote no {', '.join(missing)} for {name}")
        return VelaRun(result, {f: (work / f).read_bytes() for f in files})


def compile_tosa(
    tosa: bytes,
    name: str,
    accelerator: str,
    system_config: str,
    memory_mode: str,
    keep_dir: Path | None = None,
    timeout_s: float = 600,
) -> VelaResult:
    """Compiles one TOSA flatbuffer for `accelerator` (e.g. "ethos-u55-128")."""
    return run(
        tosa, f"{name}.tosa", accelerator, system_config, memory_mode, keep_dir=keep_dir, timeout_s=timeout_s
    ).result


def failure_reason(returncode: int, output: str) -> str:
    """Why a Vela run with nonzero `returncode` failed: a crash by a signal (a negative return
    code, as subprocess reports it) named as such, else Vela's last error line without the
    Python exception type it may start with, else its last line. Warnings ("Warning: No
    configuration file specified ...", which every run prints) are never the reason."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"Vela crashed ({name})"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    lines = [line for line in lines if not line.lower().startswith("warning")]
    errors = [line for line in lines if "error" in line.lower()]
    if not lines:
        return f"Vela exited with status {returncode} without an error message"
    return re.sub(r"^\w*(Error|Exception): ", "", (errors or lines)[-1])


def _npz_bytes(array: np.ndarray) -> bytes:
    """The bytes Vela saved as `array`. np.savez stores a bytes value as a 0-d array of numpy's
    fixed-width "S<n>" type, whose .item() drops trailing NUL bytes: region 0 data ending in
    zero-valued constants came back short (REDUCE_MIN reshaped: the 0xFF pivot kept, the
    all-zero constant Vela placed at offset 0x10 lost, so the NPU read past the end of the
    weights). tobytes() gives all n bytes; an empty value is saved as "S1" holding one NUL."""
    raw = array.tobytes()
    return b"" if array.dtype.itemsize == 1 and raw == b"\0" else raw


def _read(work: Path, name: str, system_config: str) -> VelaResult:
    npz_path = work / f"{name}_vela.npz"
    csv_path = work / f"{name}_summary_{system_config}.csv"
    if not npz_path.exists() or not csv_path.exists():
        raise VelaError(f"Vela wrote no raw output for {name} (expected {npz_path.name} and {csv_path.name})")
    wanted = ("cmd_data", "weight_data", "scratch_size", "scratch_fast_size") + tuple(
        f"{kind}_{field}" for kind in ("input", "output") for field in ("shape", "elem_size", "offset", "region")
    )
    with np.load(npz_path, allow_pickle=False) as npz:  # other keys hold pickled objects: never loaded
        missing = [key for key in wanted if key not in npz.files]
        if missing:
            raise VelaError(f"{npz_path.name} lacks {', '.join(missing)}; is this Vela 5.2?")
        data = {key: npz[key] for key in wanted}
    with open(csv_path, newline="") as f:
        summary = next(csv.DictReader(f))

    def io(kind: str) -> tuple[IoTensor, ...]:
        shapes = data[f"{kind}_shape"].reshape(-1, 6)
        return tuple(
            IoTensor(tuple(int(d) for d in shape), int(size), int(offset), int(region))
            for shape, size, offset, region in zip(
                shapes,
                data[f"{kind}_elem_size"].reshape(-1),
                data[f"{kind}_offset"].reshape(-1),
                data[f"{kind}_region"].reshape(-1),
            )
        )

    return VelaResult(
        cmd_data=_npz_bytes(data["cmd_data"]),
        weight_data=_npz_bytes(data["weight_data"]),
        scratch_size=int(data["scratch_size"]),
        fast_scratch_size=int(data["scratch_fast_size"]),
        inputs=io("input"),
        outputs=io("output"),
        npu_cycles=int(float(summary["cycles_npu"])),
        total_cycles=int(float(summary["cycles_total"])),
        inference_s=float(summary["inference_time"]),
        macs=int(float(summary["nn_macs"])),
        sram_bytes=int(float(summary["sram_memory_used"]) * 1024),
        summary=summary,
    )
