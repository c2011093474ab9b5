"""Fixtures of the end-to-end tests: one work folder per session and one runner build tree per
board, so every test's firmware is an incremental build (only the model's sources change; a
tree never switches to another board's toolchain, which would build it all again)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kiln import boards

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build_executor_runner.sh"


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runner")


@pytest.fixture(scope="session")
def builder(work):
    """Builds runners in one CMake tree per board (only the model's sources change between
    builds) through the script a person uses; returns a copy of each ELF."""

    def build(pte_path: Path, target="ethos-u55-128", *extra: str) -> Path:
        tree = work / f"build-tree-{boards.target(target).board.name}"
        result = subprocess.run(
            [str(BUILD), f"--pte={pte_path}", f"--target={target}", f"--output={tree}", *extra],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        elf = Path(result.stdout.strip().splitlines()[-1])
        assert elf.is_file()
        copy = pte_path.with_suffix(".elf")
        shutil.copyfile(elf, copy)
        return copy

    return build
