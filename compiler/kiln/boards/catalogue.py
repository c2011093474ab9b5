"""The boards kiln knows (one folder each under boards/) and the targets they have: a target
name such as ``ethos-u55-128`` (an NPU configuration) or ``cortex-m4`` (a board's CPU alone)
maps to its reference board, or, asked, to another board with that NPU configuration or CPU.
"""

from __future__ import annotations

from kiln import paths
from kiln.boards.loader import load_board
from kiln.boards.model import Board, Target
from kiln.errors import BoardError, InternalError, UsageError

BOARDS_DIR = paths.BOARDS_DIR


def board_names() -> list[str]:
    return sorted(p.parent.name for p in BOARDS_DIR.glob("*/board.toml"))


def load(name: str) -> Board:
    if name not in board_names():
        raise UsageError(f"unknown board {name!r} (known: {', '.join(board_names())})")
    return load_board(BOARDS_DIR / name / "board.toml")


def _described() -> list[Board]:
    """Every board, in name order (each read once per process: see load_board)."""
    return [load_board(BOARDS_DIR / name / "board.toml") for name in board_names()]


def targets() -> dict[str, Target]:
    """Every target kiln knows, each on its reference board: the one description with
    `reference = true` that has the NPU configuration or CPU (every target of any board needs
    one). The NPU configurations first, then the CPUs."""
    found: dict[str, Target] = {}
    described: dict[str, Board] = {}
    boards = _described()
    pairs = [(b, t) for b in boards for t in b.configurations()] + [(b, b.cpu.core) for b in boards]
    for board, target_name in pairs:
        described.setdefault(target_name, board)
        if not board.reference:
            continue
        if target_name in found:
            raise BoardError(
                f"{board.path}: reference: target {target_name} already has reference board "
                f"{found[target_name].board.name}; one board is a target's reference"
            )
        found[target_name] = board.target(target_name)
    for target_name, board in described.items():
        if target_name not in found:
            raise BoardError(
                f"{board.path}: target {target_name} has no reference board; describe "
                "it on a board with `reference = true`"
            )
    return found


def boards_with(target_name: str) -> list[Board]:
    """Every board that has target `target_name` (an NPU configuration or a CPU), the reference board first."""
    reference = target(target_name).board
    return [reference] + [b for b in _described() if b.name != reference.name and b.target(target_name) is not None]


def target(name: str, board: str | None = None) -> Target:
    """Target `name` on `board` (default: its reference board). A UsageError for an unknown
    target or board, or a board without that NPU configuration (naming what it has)."""
    known = targets()
    if name not in known:
        raise UsageError(f"unknown target {name!r} (known: {', '.join(known)})")
    if board is None or board == known[name].board.name:
        return known[name]
    described = load(board)
    on_board = described.target(name)
    if on_board is None:
        others = ", ".join(b.name for b in boards_with(name))
        if not known[name].has_npu:
            raise UsageError(
                f"board {board} has no {name} CPU: its CPU is {described.cpu.core}; build for "
                f"--target {described.cpu.core}, or for {name} on {others}"
            )
        has = described.configurations()
        instead = "one of those" if has else f"--target {described.cpu.core} (its CPU alone)"
        raise UsageError(
            f"board {board} has no {name} NPU: it has {', '.join(has) or 'none'}; "
            f"build for {instead}, or for {name} on {others}"
        )
    return on_board


def resolve(target_or_name: Target | str, board: str | None = None) -> Target:
    """The Target a caller resolved already, as it is; else target(target_or_name, board). For
    functions a caller may hand either, so a name is turned into a Target once per command."""
    if not isinstance(target_or_name, Target):
        return target(target_or_name, board)
    if board is not None and board != target_or_name.board.name:
        raise InternalError(
            f"target {target_or_name.name} on {target_or_name.board.name} was passed with board {board}"
        )
    return target_or_name
