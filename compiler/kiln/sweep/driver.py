"""`kiln sweep`: a grid's points computed (or read from the cache), the table, the answers.

    run(grid, output, ...)   every point of the grid: cached ones read, the others computed on the
                             pool or on Ray, each stored in the cache and appended to results.csv
                             as it finishes; then the table in the grid's order, the budget's
                             answer (its chosen points profiled per layer, through the same
                             cache), each point's MLIA JSON, report.html; returns a Sweep

A sweep stopped at any moment keeps every point that finished (the cache); run again, it computes
only the others.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiln.sweep import analysis, report, runners, table
from kiln.sweep.cache import Cache
from kiln.sweep.points import Grid, Point, key, points


class Progress:
    """A progress bar with the time left on `stream` (a terminal: one line redrawn; otherwise a
    line per point). The time left: this run's seconds per computed point so far, times the
    points left."""

    def __init__(self, total: int, cached: int, stream=None):
        self.total, self.done, self.stream = total, cached, stream
        self.start, self.computed = time.monotonic(), 0

    def update(self, label: str) -> None:
        self.done += 1
        self.computed += 1
        if self.stream is None:
            return
        left = (time.monotonic() - self.start) / self.computed * (self.total - self.done)
        filled = int(30 * self.done / self.total)
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {label}, about {left / 60:.1f} min left"
        tty = self.stream.isatty()
        self.stream.write(("\r" + line[:120].ljust(120)) if tty else line + "\n")
        if tty and self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


@dataclass
class Sweep:
    ordered: list[tuple[str, Point, dict]]  # (key, point, record) in the grid's order
    rows: list[dict]
    computed: list[str] = field(default_factory=list)  # keys computed by this run (not read from the cache)
    budget: tuple | None = None  # analysis.smallest's (choice, why)
    bottlenecks: list[dict] = field(default_factory=list)
    profiled: list[tuple[str, Point, dict]] = field(default_factory=list)  # the chosen points, profiled
    summary: str = ""
    files: dict[str, Path] = field(default_factory=dict)


def _compute(
    wanted: list[Point], cache: Cache, ray: str | None, workers: int | None, stream, progress_stream
) -> tuple[dict, list[str]]:
    """key -> record of every wanted point, computing only what the cache lacks."""
    keyed = [(key(p), p) for p in wanted]
    records = {k: r for k, _ in keyed if (r := cache.get(k)) is not None}
    todo = list({k: p for k, p in keyed if k not in records}.items())
    progress = Progress(len(keyed), len(keyed) - len(todo), progress_stream)
    for k in dict.fromkeys(k for k, _ in keyed):
        if k in records and stream is not None:
            stream.add(table.row(k, records[k]))
    found = runners.run_ray(todo, ray) if ray else runners.run_pool(todo, workers)
    computed = []
    labels = dict(todo)
    for k, record in found:
        cache.put(k, record)
        records[k] = record
        computed.append(k)
        if stream is not None:
            stream.add(table.row(k, record))
        progress.update(labels[k].label)
    return records, computed


def run(
    grid: Grid,
    output: Path,
    cache: Cache | None = None,
    ray: str | None = None,
    workers: int | None = None,
    budget_ms: float | None = None,
    progress=sys.stderr,
) -> Sweep:
    """The sweep of `grid` into the folder `output` (see the module's docstring). `ray`: a Ray
    address ("auto", "host:port", "ray://host:port") to compute on, else a pool of `workers`."""
    cache = cache or Cache()
    output = Path(output)
    grid_points = points(grid)
    stream = table.Stream(output / "results.csv")
    try:
        records, computed = _compute(grid_points, cache, ray, workers, stream, progress)
    finally:
        stream.close()
    ordered = [(k, p, records[k]) for p, k in ((p, key(p)) for p in grid_points)]
    result = Sweep(ordered, [table.row(k, r) for k, _, r in ordered], computed)
    if budget_ms is not None:
        result.budget = analysis.smallest(result.rows, budget_ms)
        choice = result.budget[0]
        if choice is not None:
            profiled = [replace(_point_of(result.ordered, r), profile=True) for r in choice.rows]
            layers, more = _compute(profiled, cache, ray, workers, None, progress)
            result.computed += more
            for p in profiled:
                for layer in analysis.bottlenecks(layers[key(p)].get("layers") or [], 3):
                    result.bottlenecks.append(layer | {"model": Path(p.model).stem})
            result.profiled = [(key(p), p, layers[key(p)]) for p in profiled]
    result.files["csv"], result.files["json"] = table.finish(output, ordered, result.profiled)
    report.write_mlia(output, ordered + result.profiled)
    result.summary = report.summary(result.rows, result.budget, result.bottlenecks)
    result.files["html"] = report.write_html(output / "report.html", result.rows, result.summary)
    return result


def _point_of(ordered: list[tuple[str, Point, dict]], row: dict) -> Point:
    return next(p for k, p, _ in ordered if k.startswith(row["key"]))
