"""Fixtures of the end-to-end tests: one work folder per test run, which every worker shares
(the programs of tests.fvp.helpers.compiled, which each worker may ask for and the first
compiles), and runner build trees of each worker's own, one per target, so every test's
firmware is an incremental build (only the model's sources change; a tree never switches to
another NPU configuration or toolchain, which would build it all again). Two workers never wait
for each other's build; the run's compiler cache (tests/conftest.py) gives a worker's new tree
the runtime's objects another tree compiled.

What a test file writes into `work` is named after that file's own cases."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from kiln import boards
from tests.helpers import run_folder

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build_executor_runner.sh"


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return run_folder(tmp_path_factory, "runner")


@pytest.fixture(scope="session")
def builder(tmp_path_factory):
    """Builds runners through the script a person uses, in this worker's CMake tree for the
    target (one build at a time in a worker); returns a copy of each ELF, this worker's own,
    its build's memory report copied beside it (<elf stem>.memory_report.txt and .json)."""
    trees = tmp_path_factory.mktemp("runner-trees")
    elves = tmp_path_factory.mktemp("elves")
    count = itertools.count()

    def build(pte_path: Path, target="ethos-u55-128", *extra: str) -> Path:
        tree = trees / boards.target(target).name
        result = subprocess.run(
            [str(BUILD), f"--pte={pte_path}", f"--target={target}", f"--output={tree}", *extra],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        elf = Path(result.stdout.strip().splitlines()[-1])
        assert elf.is_file()
        copy = elves / f"{pte_path.stem}-{next(count)}.elf"
        shutil.copyfile(elf, copy)
        for kind in ("txt", "json"):
            shutil.copyfile(tree / f"memory_report.{kind}", copy.with_suffix(f".memory_report.{kind}"))
        return copy

    return build
