"""A short sweep on the local process pool: its figures, its failing points, its outputs, and a
sweep killed midway that resumes without recomputing what finished."""

import csv
import html
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kiln import cli, flow
from kiln.spec import CompileSpec
from kiln.sweep import Grid, key, points, run
from kiln.sweep.cache import Cache


def _rows(swept):
    return list(csv.DictReader((swept.output / "results.csv").open()))


def test_figures_are_the_compile_reports(pool_sweep, tmp_path):
    """The sweep's row of a point holds what `kiln compile`'s report says of that point."""
    _, report = flow.compile_pte(
        "tiny_cnn",
        CompileSpec(target="ethos-u85-256", memory_mode="Dedicated_Sram_256KB"),
        tmp_path / "m.pte",
        log=None,
    )
    expected = json.loads(report.read_text())
    (row,) = [
        r
        for r in _rows(pool_sweep)
        if (r["model"], r["target"], r["memory_mode"]) == ("tiny_cnn", "ethos-u85-256", "Dedicated_Sram_256KB")
    ]
    assert row["status"] == "ok"
    assert int(row["npu_cycles"]) == expected["npu_cycles"] > 0
    assert float(row["latency_ms"]) == expected["npu_inference_ms"]
    memory = expected["memory"]
    assert int(row["sram_bytes"]) == memory["planned_bytes"] + memory["scratch_bytes"] + memory["fast_scratch_bytes"]
    regions = {r["region"]: r for r in memory["regions"]}
    assert int(row["flash_bytes"]) == regions["ddr"]["placed"]["the .pte"]
    assert int(row["region_sram_bytes"]) == regions["sram"]["need"]
    cpu = [o["node"] for o in expected["ops"] if o["where"] == "cpu"]
    assert [part.split(" ")[0] for part in row["cpu_ops"].split("; ")] == cpu


def test_failing_points_are_results_and_do_not_stop_the_others(pool_sweep):
    rows = _rows(pool_sweep)
    assert len(rows) == 8
    by = {(r["model"], r["target"], r["memory_mode"]): r for r in rows}
    refused = by[("tiny_cnn", "ethos-u55-128", "Dedicated_Sram_256KB")]
    assert refused["status"] == "refused"
    assert "memory mode 'Dedicated_Sram_256KB' is not available on ethos-u55-128" in refused["reason"]
    broken = [r for r in rows if r["model"].endswith("broken.py")]
    assert all(r["status"] != "ok" for r in broken)
    assert any("this model cannot run" in r["reason"] for r in broken)
    assert [r["status"] for r in rows if r["model"] == "tiny_cnn"].count("ok") == 3


def test_outputs_pareto_budget_and_mlia_json(pool_sweep):
    result = pool_sweep.sweep
    # 1 ms for tiny_cnn and broken.py: broken.py compiles nowhere, so no configuration serves both
    assert result.budget[0] is None and "no configuration compiles and fits for every model" in result.budget[1]
    assert "tiny_cnn: Pareto front" in result.summary and "Vela's estimates" in result.summary
    page = html.unescape((pool_sweep.output / "report.html").read_text())
    assert page.count("data:image/png;base64,") == 2 and "follows Vela's performance model" in page
    mlia = pool_sweep.output / "mlia"
    assert len(list(mlia.glob("*.json"))) == 8
    doc = json.loads((mlia / "tiny_cnn-ethos-u55-128-ref-default-a8.json").read_text())
    # the fields shared/notes/deploy-formats.md lists for MLIA 0.12's `check --performance --json`
    assert doc["schema_version"] == "1.2.0"
    assert set(doc) >= {"schema_version", "run_id", "timestamp", "tool", "target", "model", "context", "backends"}
    (perf,) = doc["results"]
    assert perf["kind"] == "performance" and perf["status"] == "ok" and perf["producer"] == "vela"
    assert {m["name"]: m["unit"] for m in perf["metrics"]}["npu_cycles"] == "cycles"
    row = next(r for r in result.rows if r["key"] == doc["run_id"].replace("-", "")[:16])
    assert {m["name"]: m.get("value") for m in perf["metrics"]}["npu_cycles"] == row["npu_cycles"]


def test_budget_chooses_and_profiles_the_smallest(tmp_path, pool_sweep, mlia_errors):
    """tiny_cnn alone meets 1 ms everywhere it compiles: the U55-128 has the fewest MACs; its
    bottleneck layers come from its profile, every NPU layer's cycles Vela's own."""
    grid = Grid(models=("tiny_cnn",), targets=pool_sweep.grid.targets, memory_modes=pool_sweep.grid.memory_modes)
    result = run(grid, tmp_path / "out", cache=Cache(pool_sweep.cache), workers=1, budget_ms=1.0, progress=None)
    assert result.computed == [result.profiled[0][0]]  # only the profiled point is new
    assert result.budget[0].configuration == ("ethos-u55-128", None, None, 8)
    layers = result.profiled[0][2]["layers"]
    npu = [layer for layer in layers if layer["where"] == "npu"]
    chosen = next(r for r in result.rows if (r["target"], r["memory_mode"]) == ("ethos-u55-128", None))
    assert result.profiled[0][2]["figures"]["npu_cycles"] == chosen["npu_cycles"]  # the same compile
    assert npu and any(layer["vela_npu_cycles"] for layer in npu)
    assert result.bottlenecks[0]["vela_npu_cycles"] == max(layer["vela_npu_cycles"] or 0 for layer in npu)
    doc = json.loads((tmp_path / "out" / "mlia" / "tiny_cnn-ethos-u55-128-ref-default-a8-profile.json").read_text())
    (perf,) = doc["results"]
    ids = {e["id"] for e in perf["entities"]}
    assert perf["breakdowns"] and all(b["entity_id"] in ids for b in perf["breakdowns"])
    assert {e["kind"] for e in perf["entities"]} == {"vela_performance_layer"}
    assert mlia_errors(doc) == []  # with its breakdowns, as MLIA 0.12.3's schema has them


def test_killed_sweep_resumes_without_recomputing(tmp_path, capsys):
    grid = Grid(models=("tiny_cnn",), targets=("ethos-u55-64", "ethos-u55-256", "ethos-u65-256"))
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "kiln.cli", "sweep", "tiny_cnn", "--output", str(tmp_path / "first")]
    command += ["--target", ",".join(grid.targets), "--cache", str(cache), "--workers", "1", "--quiet"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list(cache.glob("*/*.json")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the sweep and its worker, mid-run
    process.wait()
    finished = {p.stem: p.stat().st_mtime_ns for p in cache.glob("*/*.json")}
    assert 1 <= len(finished) < 3, "the sweep ended before it could be killed midway"
    result = run(grid, tmp_path / "second", cache=Cache(cache), workers=1, progress=None)
    everything = [key(p) for p in points(grid)]
    assert sorted(result.computed) == sorted(set(everything) - set(finished))
    assert {k: Path(Cache(cache).path(k)).stat().st_mtime_ns for k in finished} == finished
    assert [r["status"] for r in result.rows] == ["ok"] * 3
    capsys.readouterr()
    assert cli.main(command[3:]) == 0  # the command again, in this process: everything is cached now
    assert f"computed 0 point(s), read 3 from the cache in {cache}" in capsys.readouterr().out


def test_run_on_the_virtual_platform(tmp_path):
    """--run: the firmware of a point built and run; its outputs equal run-host's (an independent
    reference: numpy kernels and tosa_reference_model) and the NPU's PMU counted cycles."""
    grid = Grid(models=("tiny_cnn",), targets=("ethos-u55-128",), run=True)
    result = run(grid, tmp_path / "out", cache=Cache(tmp_path / "cache"), workers=1, progress=None)
    (row,) = result.rows
    assert row["status"] == "ok" and row["vp_status"] == 0
    assert row["vp_output_equal_host"] is True and row["vp_pmu_cycles"] > 0
    (_, _, record) = result.ordered[0]
    assert len(record["platform"]["pmu_cycles"]) == 2 and record["platform"]["differences"] == []
