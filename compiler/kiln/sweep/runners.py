"""Where a sweep's points are computed: a local process pool (the default) or a Ray cluster.

Both take (key, point) pairs and yield (key, record) pairs as points finish, in finishing order;
each point is kiln.sweep.evaluate.evaluate(point) in a worker process, so both give the same
records (but for their `seconds`). Workers are spawned, not forked (torch's threads do not
survive a fork), and each imports torch once, on its first point.

Ray: `address` "auto" joins the cluster this machine belongs to (`ray start`), "local" starts a
cluster of this machine's CPUs for the sweep (and stops it after), an address joins that one
("ray://host:10001" through Ray Client, or "host:6379"), and a process that has called ray.init
itself keeps its own connection. Every machine of the cluster needs kiln installed as
on this one (the same checkout or wheel, and its pinned dependencies): a point's content hash
includes kiln's sources, so a worker with other sources gives other figures under the same key.
Ray's own logs stay off the terminal (log_to_driver=False, logging_level=ERROR); the cluster's
are in its session folder (/tmp/ray/session_latest/logs).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from kiln.errors import ToolMissingError, UsageError
from kiln.sweep.evaluate import evaluate
from kiln.sweep.points import Point

Task = tuple[str, Point]


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _one_thread() -> None:
    """A pool worker's start: one thread for torch's and BLAS's kernels (OMP_NUM_THREADS, read when
    torch is imported, on the worker's first point), as Ray gives a task of one CPU; a pool of
    one worker per CPU would otherwise run CPUs x CPUs threads."""
    os.environ["OMP_NUM_THREADS"] = "1"


def run_pool(tasks: Iterable[Task], workers: int | None = None) -> Iterator[tuple[str, dict]]:
    """The tasks' records from a pool of `workers` local processes (default: one per CPU)."""
    tasks = list(tasks)
    if not tasks:
        return
    workers = min(workers or default_workers(), len(tasks))
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_one_thread)
    try:
        pending = {pool.submit(evaluate, point): key for key, point in tasks}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future.result()
    finally:  # stopped early (Ctrl-C, an error): points not started are dropped, not waited for
        pool.shutdown(wait=False, cancel_futures=True)


def _ray():
    try:
        import ray
    except ImportError as error:
        raise ToolMissingError("Ray is not installed: pip install ray==2.60.0 (or ./scripts/setup.sh)") from error
    return ray


def run_ray(tasks: Iterable[Task], address: str = "auto") -> Iterator[tuple[str, dict]]:
    """The tasks' records from a Ray cluster (see the module's docstring for `address`). A
    connection this function opened is closed when it returns."""
    tasks = list(tasks)
    if not tasks:
        return
    ray = _ray()
    opened = not ray.is_initialized()
    if opened:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=True)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise UsageError(f"cannot join the Ray cluster at {address!r}: {error}") from error
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(evaluate)
        pending = {remote.remote(point): key for key, point in tasks}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
    finally:
        if opened:
            ray.shutdown()
