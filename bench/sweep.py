"""Throughput of `kiln sweep`: points per minute on the local pool and on a local Ray cluster, Ray's
overhead per point, and the cache's speed-up.

Run: .venv/bin/python bench/sweep.py [--models tiny_cnn,ds_cnn] [--targets ethos-u55-64,...] [--workers 2]

Each run starts from an empty cache (a temporary folder) and computes every point of the grid:
first on a pool of --workers spawned processes, then on a Ray cluster of --workers CPUs started
here (its start timed apart), then the pool's sweep again over its full cache. Per run: wall time,
points per minute, a point's own seconds (evaluate's; a worker's first point includes its import
of torch), and the runner's overhead per point: the median idle time of a worker between the end
of one point and the start of its next (each record's worker stamps), beside an upper bound that
also holds the workers' start and the idle tail while the last points finish: (wall time - the
points' own seconds summed over the workers) / points. Ray's overhead is stated as a share of the
median point's own seconds in each run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kiln.sweep import Grid, run
from kiln.sweep.cache import Cache


def _timed(grid: Grid, cache: Path, out: Path, workers: int, ray: str | None = None):
    start = time.perf_counter()
    result = run(grid, out, cache=Cache(cache), workers=workers, ray=ray, progress=None)
    wall = time.perf_counter() - start
    seconds = [r["seconds"] for _, _, r in result.ordered]
    return result, wall, seconds


def _gaps(result) -> list[float]:
    """The idle time of each worker between one point's end and its next point's start: what the
    runner adds to a point once its workers run (the driver's turn-around, the transport)."""
    by_worker: dict[tuple, list[dict]] = {}
    for _, _, record in result.ordered:
        w = record["worker"]
        by_worker.setdefault((w["host"], w["pid"]), []).append(w)
    gaps = []
    for stamps in by_worker.values():
        stamps.sort(key=lambda w: w["start"])
        gaps += [b["start"] - a["end"] for a, b in zip(stamps, stamps[1:])]
    return gaps


def _line(name: str, result, wall: float, seconds: list[float], workers: int) -> float:
    n = len(seconds)
    bound = max(0.0, wall - sum(seconds) / workers) / n
    gaps = _gaps(result)
    gap = statistics.median(gaps) if gaps else float("nan")
    print(
        f"{name:10} {n} points in {wall:6.1f} s: {n / wall * 60:6.1f} points/min; a point's own time median "
        f"{statistics.median(seconds):.2f} s; overhead per point {gap * 1e3:.1f} ms between points on a worker "
        f"(at most {bound:.3f} s with the workers' start and the last points' tail)"
    )
    return gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny_cnn,fc_autoencoder")
    parser.add_argument("--targets", default="ethos-u55-64,ethos-u55-128,ethos-u55-256,ethos-u85-256")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    grid = Grid(models=tuple(args.models.split(",")), targets=tuple(args.targets.split(",")))
    with tempfile.TemporaryDirectory(prefix="kiln-bench-sweep-") as tmp:
        tmp = Path(tmp)
        result, wall, seconds = _timed(grid, tmp / "pool-cache", tmp / "pool", args.workers)
        n = len(result.ordered)
        print(f"{n} points ({', '.join(grid.models)} x {', '.join(grid.targets)}), {args.workers} workers")
        _line("pool", result, wall, seconds, args.workers)
        typical = statistics.median(seconds)

        import ray

        start = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        print(f"ray start  {time.perf_counter() - start:.1f} s (a local cluster of {args.workers} CPUs)")
        try:
            ray_result, ray_wall, ray_seconds = _timed(grid, tmp / "ray-cache", tmp / "ray", args.workers, ray="auto")
        finally:
            ray.shutdown()
        overhead = _line("ray", ray_result, ray_wall, ray_seconds, args.workers)
        own = statistics.median(ray_seconds)
        print(
            f"ray's overhead per point: {overhead / typical:.1%} of the pool's median point ({typical:.2f} s), "
            f"{overhead / own:.1%} of Ray's own ({own:.2f} s)"
        )
        same = (tmp / "pool" / "results.csv").read_bytes() == (tmp / "ray" / "results.csv").read_bytes()
        print(f"ray's table equals the pool's: {same}")

        start = time.perf_counter()
        cached = run(grid, tmp / "again", cache=Cache(tmp / "pool-cache"), workers=args.workers, progress=None)
        again = time.perf_counter() - start
        assert not cached.computed
        print(f"cached     {n} points in {again:6.2f} s: {wall / again:.0f}x faster than computing them")


if __name__ == "__main__":
    main()
