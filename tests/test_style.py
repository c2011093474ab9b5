"""The tree's style, checked by the tools that define it: ruff's formatter and linter for
Python (configured in pyproject.toml's [tool.ruff]) and clang-format 19 for C and C++
(.clang-format). Both are installed by ./scripts/setup.sh; a missing one fails the suite, as a
style nobody checks drifts. To fix what they report:

    .venv/bin/ruff format . && .venv/bin/ruff check --fix .
    git ls-files '*.c' '*.cpp' '*.h' | xargs clang-format-19 -i
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).parent / "ruff"
CLANG_FORMAT = "clang-format-19"


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def _tracked(*patterns: str) -> list[str]:
    return _run(["git", "ls-files", *patterns]).stdout.split()


def test_python_is_formatted():
    assert RUFF.exists(), f"{RUFF} is missing: run ./scripts/setup.sh"
    done = _run([str(RUFF), "format", "--check", "."])
    assert done.returncode == 0, done.stdout + done.stderr


def test_python_passes_the_linter():
    done = _run([str(RUFF), "check", "--output-format", "concise", "."])
    assert done.returncode == 0, done.stdout + done.stderr


def test_c_and_cpp_are_formatted():
    assert shutil.which(CLANG_FORMAT), f"{CLANG_FORMAT} is missing: run ./scripts/setup.sh"
    files = _tracked("*.c", "*.cpp", "*.h")
    assert files, "git ls-files found no C or C++ sources"
    done = _run([CLANG_FORMAT, "--dry-run", "--Werror", *files])
    assert done.returncode == 0, done.stderr[-4000:]


def test_the_checks_can_fail(tmp_path):
    """Each tool, given a file written against its style, reports it (so the tests above
    passing means the tree is formatted, not that the tools looked at nothing)."""
    (tmp_path / "bad.py").write_text("import os\nx=( 1,\n2 )\n")
    assert _run([str(RUFF), "format", "--check", str(tmp_path / "bad.py")]).returncode != 0
    assert _run([str(RUFF), "check", "--no-cache", str(tmp_path / "bad.py")]).returncode != 0
    (tmp_path / "bad.cpp").write_text("int  f( ){return 1;}\n")
    assert (
        _run(
            [CLANG_FORMAT, "--dry-run", "--Werror", f"--style=file:{ROOT / '.clang-format'}", str(tmp_path / "bad.cpp")]
        ).returncode
        != 0
    )
