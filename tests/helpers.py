"""What tests of several areas share: folders of this test run that every pytest-xdist worker
sees, and made-once contents in them.

scripts/test.sh runs test files side by side in worker processes. A session fixture is made
once per worker, so an expensive one (a firmware build, a compiled program) was made by each
worker that needed it; in a run folder it is made once per run, by the first worker that asks,
while the others wait for it."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MADE = ".made"  # in a folder once() made, written after its make() returned


def run_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The folder `name` of this test run, the same for each of its workers."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # workers' basetemps share a parent
    path = root / "run" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def locked(path: Path) -> Iterator[Path]:
    """Exclusive use of `path` among this run's processes while the block runs (an advisory
    lock on `path`.lock, released when the block ends or its process dies)."""
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path


def once(folder: Path, make: Callable[[Path], object]) -> Path:
    """`folder` filled by make(folder) once per run: the first caller makes it, the others wait
    for it and find it made. A make() that raised is tried again by the next caller."""
    with locked(folder):
        if not (folder / MADE).exists():
            folder.mkdir(parents=True, exist_ok=True)
            make(folder)
            (folder / MADE).touch()
    return folder
