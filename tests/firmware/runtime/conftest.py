"""Fixtures of the runtime's host tests: the runtime built once per test run for the host,
under AddressSanitizer and UBSan (tests/firmware/runtime/CMakeLists.txt)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import once, run_folder

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def runtime_host(tmp_path_factory) -> Path:
    return once(run_folder(tmp_path_factory, "runtime-host"), _build) / "runtime_host"


def _build(build: Path) -> None:
    subprocess.run(
        [
            "cmake",
            "-S",
            str(ROOT / "tests" / "firmware" / "runtime"),
            "-B",
            str(build),
            "-G",
            "Ninja",
            f"-DKILN_PYTHON={sys.executable}",
        ],
        check=True,
        capture_output=True,
    )
    done = subprocess.run(["ninja", "-C", str(build)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
