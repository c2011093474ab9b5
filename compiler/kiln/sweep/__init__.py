"""Design-space sweeps: many compiles of models over targets, boards, memory modes and activation
widths, computed on a local process pool or a Ray cluster, cached per point, tabled and answered.

    points.py    the grid (flags or a TOML file), its points, each point's content hash
    evaluate.py  one point's record: the pure function every worker runs
    cache.py     finished points on disk, one file per content hash, written atomically
    runners.py   the local process pool and Ray: (key, point) in, (key, record) out as they finish
    table.py     results.csv (streamed as points finish, then in the grid's order) and results.json
    analysis.py  Pareto fronts, the smallest configuration meeting a latency budget, bottlenecks
    report.py    the terminal summary, report.html, each point's MLIA 0.12 JSON
    driver.py    `kiln sweep`: all of it in order (run)

Cycle counts are Vela's estimates throughout; kiln's virtual platform's NPU model follows Vela's
performance model. docs/sweeps.md is the user's page.
"""

from kiln.sweep.driver import Sweep, run
from kiln.sweep.points import ALL, ZOO, Grid, Point, key, load, points

__all__ = ["ALL", "ZOO", "Grid", "Point", "Sweep", "key", "load", "points", "run"]
