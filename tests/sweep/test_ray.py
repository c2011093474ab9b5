"""The shared short sweep computed again on a real local Ray cluster (2 CPUs, started here and shut
down after): every point computed on Ray, and the same table, byte for byte, as the pool's."""

import pytest

from kiln.sweep import key, points, run
from kiln.sweep.cache import Cache

ray = pytest.importorskip("ray", reason="Ray is not installed: ./scripts/setup.sh installs it")


@pytest.fixture
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_gives_the_pools_table(cluster, pool_sweep, tmp_path):
    result = run(pool_sweep.grid, tmp_path / "out", cache=Cache(tmp_path / "cache"), ray="auto", progress=None)
    assert sorted(result.computed) == sorted({key(p) for p in points(pool_sweep.grid)})
    assert (tmp_path / "out" / "results.csv").read_bytes() == (pool_sweep.output / "results.csv").read_bytes()
