"""The runner's ETDump writer (firmware/apps/executor_runner/etdump_writer.cpp), built for the host
under AddressSanitizer and UBSan with etdump_host.cpp's fixed runs: ExecuTorch 1.5.1's own reader
(flatc with the etdump_schema_flatcc.fbs ExecuTorch ships, size-prefixed) reads back every field
as etdump_host.cpp sets it, and a buffer too small for them fails with kTooLarge without writing a
byte past its capacity."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.compiler.test_pte import et_tool, needs_executorch
from tests.helpers import once, run_folder

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
K_TOO_LARGE = 0x004  # kiln::runtime::ErrorCode::kTooLarge


def _build(folder: Path) -> None:
    done = subprocess.run(
        [
            "c++",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-exceptions",
            "-fno-rtti",
            f"-I{ROOT / 'firmware' / 'runtime' / 'include'}",
            f"-I{ROOT / 'firmware' / 'apps' / 'executor_runner'}",
            str(HERE / "etdump_host.cpp"),
            str(ROOT / "firmware" / "apps" / "executor_runner" / "etdump_writer.cpp"),
            "-o",
            str(folder / "etdump_host"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def etdump_host(tmp_path_factory) -> Path:
    return once(run_folder(tmp_path_factory, "etdump-host"), _build) / "etdump_host"


def _write(tool: Path, out: Path, capacity: int) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool), str(out), str(capacity)], capture_output=True, text=True, timeout=60)


def _event(name=None, chain=0, instruction=-1, debug_int=-1, debug_str=None, start=0, end=0) -> dict:
    return {
        "_type": "ProfileEvent",
        "name": name,
        "chain_index": chain,
        "instruction_id": instruction,
        "delegate_debug_id_int": debug_int,
        "delegate_debug_id_str": debug_str,
        "delegate_debug_metadata": None,
        "start_time": start,
        "end_time": end,
    }


# etdump_host.cpp's runs, written out by hand
CALL = _event(name="DELEGATE_CALL", instruction=1, end=5000)
EXPECTED = [
    (
        "Execute",
        [
            _event(instruction=1, debug_str="features.0 aten.conv2d.default", end=1234),
            CALL,
            _event(chain=2, debug_int=7, start=2**40 + 3, end=2**41 + 5),
        ],
    ),
    ("Execute", []),
    ("second block", [CALL]),
]


@needs_executorch
def test_executorch_reads_every_field_back(etdump_host, tmp_path):
    out = tmp_path / "runs.etdp"
    done = _write(etdump_host, out, 4096)
    assert done.returncode == 0, done.stdout + done.stderr
    data = out.read_bytes()
    assert done.stdout.split() == ["wrote", str(len(data))]
    # the size prefix (the bytes after it), then the identifier after the root offset
    assert int.from_bytes(data[:4], "little") == len(data) - 4 and data[8:12] == b"ED00"
    etdump = et_tool("et_etdump.py", out)["etdump"]
    assert etdump["version"] == 0
    runs = [(r["name"], [e["profile_event"] for e in r["events"]]) for r in etdump["run_data"]]
    assert runs == EXPECTED
    assert all(r["bundled_input_index"] == -1 and r["allocators"] is None for r in etdump["run_data"])


def test_a_buffer_too_small_fails_without_writing_past_it(etdump_host, tmp_path):
    full = _write(etdump_host, tmp_path / "full.etdp", 4096)
    assert full.returncode == 0, full.stdout + full.stderr
    length = len((tmp_path / "full.etdp").read_bytes())
    # every capacity short of the length, sampled (the header, a table, a string, the last byte)
    for capacity in sorted({0, 3, 4, 11, 12, 40, 100, 137, length // 2, length - 8, length - 1}):
        done = _write(etdump_host, tmp_path / "short.etdp", capacity)
        # etdump_host exits 2 when a guard byte past the capacity changed
        assert done.returncode == 1, (capacity, done.stdout, done.stderr)
        assert done.stdout.split() == ["error", str(K_TOO_LARGE), str(length), str(capacity)], capacity
        assert not (tmp_path / "short.etdp").exists()
    exact = _write(etdump_host, tmp_path / "exact.etdp", length)
    assert exact.returncode == 0 and (tmp_path / "exact.etdp").read_bytes() == (tmp_path / "full.etdp").read_bytes()
