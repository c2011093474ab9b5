"""Finished points on disk: one JSON file per point, named by the point's content hash.

    <dir>/<key[:2]>/<key>.json    {"key": key, "record": record}

A file is written whole or not at all (written beside, then renamed over), so a sweep killed at
any moment leaves only finished points, each readable. A file that cannot be read or names
another key is treated as missing (the point is computed again and the file replaced). The
default folder is kiln.paths.cache_dir()/sweep; deleting it costs only recomputation.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kiln import paths


def default_dir() -> Path:
    return paths.cache_dir() / "sweep"


class Cache:
    def __init__(self, directory: Path | None = None):
        self.directory = Path(directory) if directory is not None else default_dir()

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The record cached for `key`, or None."""
        try:
            data = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("record"), dict):
            return None
        return data["record"]

    def put(self, key: str, record: dict) -> Path:
        """`record` stored under `key`, atomically; its path."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"key": key, "record": record}, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path
