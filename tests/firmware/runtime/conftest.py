"""Fixtures of the runtime's host tests: the runtime built once per session for the host,
under AddressSanitizer and UBSan (tests/firmware/runtime/CMakeLists.txt)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def runtime_host(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("runtime-host")
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
    return build / "runtime_host"
