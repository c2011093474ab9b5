"""A sweep's points: the configurations it compiles, from flags or a TOML file, and the content
hash that names each point's cached result.

A point is one model compiled for one target on one board in one Vela memory mode at one
activation width. The memory modes stand for the SRAM sizes too: the Ethos-U65/U85 modes
Dedicated_Sram_256KB/_384KB/_512KB are the board's choices of the NPU's dedicated SRAM.

    Grid      what to sweep (each axis a list; None: the default of each target or board)
    points()  the grid's points, in a fixed order: models x targets x boards x memory modes x bits
    load()    a Grid from a TOML file and flags (the same names, as lists)
    key()     the point's content hash: its options, the model's source (and a file model's weights),
              kiln's own sources, and Vela's version; equal keys mean equal results
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kiln import boards, paths
from kiln.errors import UsageError
from kiln.spec import CompileSpec

ALL = "all"  # as a memory mode: every mode the target's family has on the board; as a target: every NPU one
ZOO = "zoo"  # as a model: every model of kiln's zoo (kiln.models.MODELS), in name order

# What a record holds: a change of its fields changes every key, so old cache files are not read.
RECORD_VERSION = 1


@dataclass(frozen=True)
class Point:
    """One configuration to compile. `board` None: the target's reference board; `memory_mode`
    None: the board's default for the target. `profile`: also each layer's cycles (kiln profile);
    `run`: also the firmware run on the virtual platform (kiln.sweep.evaluate.run_firmware)."""

    model: str
    target: str
    board: str | None = None
    memory_mode: str | None = None
    activation_bits: int = 8
    profile: bool = False
    run: bool = False  # also build kiln's executor runner and run it on kiln's virtual platform

    def spec(self) -> CompileSpec:
        return CompileSpec(
            target=self.target, board=self.board, memory_mode=self.memory_mode, activation_bits=self.activation_bits
        )

    @property
    def label(self) -> str:
        """A short, file-name-safe name: model, target, board, mode, bits."""
        parts = [
            Path(self.model).stem,
            self.target,
            (self.board or "ref").replace("/", "_"),
            self.memory_mode or "default",
        ]
        return (
            "-".join(parts)
            + f"-a{self.activation_bits}"
            + ("-profile" if self.profile else "")
            + ("-run" if self.run else "")
        )

    @property
    def configuration(self) -> tuple:
        """The point without its model: what a budget chooses among."""
        return (self.target, self.board, self.memory_mode, self.activation_bits)


@dataclass(frozen=True)
class Grid:
    models: tuple[str, ...]
    targets: tuple[str, ...]
    boards: tuple[str | None, ...] = (None,)
    memory_modes: tuple[str | None, ...] = (None,)
    activation_bits: tuple[int, ...] = (8,)
    run: bool = False  # each point also run on the virtual platform

    def __post_init__(self):
        if not self.models or not self.targets:
            raise UsageError("a sweep needs at least one model and one target")
        known = boards.targets()
        object.__setattr__(self, "models", _expand(self.models, ZOO, _zoo_names))
        # ALL: every NPU configuration (a CPU target has no NPU figures for a sweep to weigh)
        npus = [name for name, t in known.items() if t.has_npu]
        object.__setattr__(self, "targets", _expand(self.targets, ALL, lambda: npus))
        for t in self.targets:
            if t not in known:
                raise UsageError(f"unknown target {t!r} (`kiln targets` lists them)")
        for b in self.boards:
            if b is not None and b not in boards.board_names():
                raise UsageError(f"unknown board {b!r} (known: {', '.join(boards.board_names())})")


def _expand(names: tuple[str, ...], word: str, every) -> tuple[str, ...]:
    """`names` with `word` replaced by every() in place, each name once, in the order given."""
    out = [n for name in names for n in (every() if name == word else [name])]
    return tuple(dict.fromkeys(out))


def _zoo_names() -> list[str]:
    from kiln import models

    return sorted(models.MODELS)


def points(grid: Grid) -> list[Point]:
    """The grid's points. A board without the target's NPU configuration makes no point (there is no
    such configuration); a memory mode the target's family lacks on the board makes a point that
    fails with the reason. ALL expands to the family's modes on the board."""
    out: list[Point] = []
    for model in grid.models:
        for target in grid.targets:
            for board in grid.boards:
                if board is not None and board not in [b.name for b in boards.boards_with(target)]:
                    continue
                resolved = boards.resolve(target, board)
                modes: list[str | None] = []
                for mode in grid.memory_modes:
                    modes += list(resolved.memory_modes) if mode == ALL else [mode]
                for mode in dict.fromkeys(modes):
                    for bits in grid.activation_bits:
                        out.append(Point(model, target, board, mode, bits, run=grid.run))
    return out


AXES = ("models", "targets", "boards", "memory_modes", "activation_bits")
SETTINGS = ("budget_ms",)


def load(path: Path | None = None, **given) -> tuple[Grid, dict]:
    """A Grid from a TOML file (its keys: AXES, each a list, and SETTINGS) and the axes `given`
    (flags: a non-empty list replaces the file's), and the settings (budget_ms)."""
    data: dict = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise UsageError(f"cannot read the sweep file {path}: {error}") from error
        unknown = [k for k in data if k not in AXES + SETTINGS]
        if unknown:
            raise UsageError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(AXES + SETTINGS)})")
        if not all(isinstance(data[k], list) for k in AXES if k in data):
            raise UsageError(f"{path}: {', '.join(AXES)} are lists")
    data |= {k: list(v) for k, v in given.items() if v}
    grid = Grid(
        models=tuple(data.get("models", ())),
        targets=tuple(data.get("targets", ())),
        boards=tuple(data.get("boards") or (None,)),
        memory_modes=tuple(data.get("memory_modes") or (None,)),
        activation_bits=tuple(data.get("activation_bits") or (8,)),
    )
    return grid, {k: data[k] for k in SETTINGS if k in data}


def _digest(files) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(str(f.relative_to(paths.SOURCE_ROOT) if f.is_relative_to(paths.SOURCE_ROOT) else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@functools.cache
def kiln_fingerprint() -> str:
    """kiln's version, a hash of its compiler's and NPU model's sources and the board descriptions,
    and Vela's version: what a point's figures depend on besides the point and its model."""
    # The simulator's folder, found without importing it (kiln.sweep does not use the simulator).
    trees = [
        Path(p)
        for name in ("kiln", "kiln.simulator")
        for p in importlib.util.find_spec(name).submodule_search_locations
    ]
    files = [f for tree in trees for f in tree.rglob("*.py")] + list(paths.BOARDS_DIR.rglob("*.toml"))
    versions = {p: importlib.metadata.version(p) for p in ("kiln", "ethos-u-vela", "torch", "torchao")}
    return hashlib.sha256((json.dumps(versions, sort_keys=True) + _digest(files)).encode()).hexdigest()


@functools.cache
def model_fingerprint(model: str) -> str:
    """A zoo model: its file and the zoo's shared files (its weights are made from them: seeded,
    or trained and cached by a hash of the source). A .py file: its bytes and its weights (the
    module's state_dict, loaded here: a file may read them from elsewhere)."""
    from kiln import models

    entry = models.find(model)
    if entry is not None:
        zoo = Path(models.__file__).parent
        module = entry.build.args[0] if isinstance(entry.build, functools.partial) else model
        files = [zoo / f"{module}.py", *[f for f in zoo.glob("_*.py")]]
        return _digest([f for f in files if f.is_file()])
    path = Path(model)
    if not path.is_file():
        raise UsageError(f"{model!r} is neither a zoo model nor a file")
    from kiln.frontend.export import load_model

    h = hashlib.sha256(path.read_bytes())
    try:
        weights = load_model(model).module.state_dict()
    except Exception as error:  # the point fails the same way when compiled: its result says why
        h.update(f"cannot load: {type(error).__name__}: {error}".encode())
        return h.hexdigest()
    for name, tensor in sorted(weights.items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def key(point: Point) -> str:
    """The point's content hash (hex): equal for two points whose results must be equal."""
    content = {
        "record": RECORD_VERSION,
        "point": dataclasses.asdict(point) | {"model": Path(point.model).name},
        "model": model_fingerprint(point.model),
        "kiln": kiln_fingerprint(),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
