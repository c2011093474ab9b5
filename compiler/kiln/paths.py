"""Where kiln's files are: every path kiln reads or writes outside the Python package.

Two installs, one answer: in a checkout (editable install) the source tree is the
repository root, the folder holding boards/, firmware/ and cmake/ beside compiler/;
in an installed wheel those three folders ship as package data under kiln/_share/.
Build products go to ``<checkout>/build`` in a checkout and to ``./build`` (the
current directory) otherwise; KILN_BUILD_DIR overrides both. Files worth keeping across
runs (e.g. a zoo model's trained weights) go to ``cache_dir()``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from kiln.errors import ToolMissingError

_PACKAGE = Path(__file__).resolve().parent


def _checkout() -> Path | None:
    """The repository root when this package runs from a checkout's compiler/kiln/."""
    root = _PACKAGE.parent.parent
    if (root / "compiler" / "kiln").resolve() == _PACKAGE and (root / "boards").is_dir():
        return root
    return None


CHECKOUT: Path | None = _checkout()
# The tree with boards/, firmware/ and cmake/.
SOURCE_ROOT: Path = CHECKOUT if CHECKOUT is not None else _PACKAGE / "_share"
BOARDS_DIR = SOURCE_ROOT / "boards"
FIRMWARE_DIR = SOURCE_ROOT / "firmware"
CMAKE_DIR = SOURCE_ROOT / "cmake"
TOOLCHAIN_FILE = CMAKE_DIR / "arm-none-eabi-gcc.cmake"


def build_root() -> Path:
    """Where builds go unless a command is given an output directory."""
    if os.environ.get("KILN_BUILD_DIR"):
        return Path(os.environ["KILN_BUILD_DIR"]).resolve()
    return (CHECKOUT / "build") if CHECKOUT is not None else Path.cwd().resolve() / "build"


def cache_dir() -> Path:
    """Where kiln keeps files that are costly to make and safe to delete (made again when missing):
    KILN_CACHE if set, else kiln/ under XDG_CACHE_HOME, else ~/.cache/kiln. Not created here."""
    if os.environ.get("KILN_CACHE"):
        return Path(os.environ["KILN_CACHE"]).resolve()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").resolve() / "kiln"


def vela_ini() -> Path:
    """Vela's own system configurations and memory modes: the vela.ini that the installed
    ethos-u-vela wheel ships (ethosu is a namespace package: finding it runs no code)."""
    spec = importlib.util.find_spec("ethosu")
    if spec is None or not spec.submodule_search_locations:
        raise ToolMissingError("Vela (the ethos-u-vela package) is not installed; run ./scripts/setup.sh")
    return Path(list(spec.submodule_search_locations)[0]) / "config_files" / "Arm" / "vela.ini"
