"""The results table: one row per point, as CSV (and JSON, the records whole).

    results.csv    COLUMNS, then one column per board region ("region_<name>_bytes": what the
                   program needs there, kiln.firmware.runner_build.fit's figure); rows in the
                   grid's order once the sweep ends, in finishing order while it runs (each row
                   appended and flushed as its point finishes)
    results.json   {"note": ..., "points": [{"key": ..., **record}], "profiled": [...]} in the grid's
                   order; "profiled": the points a latency budget chose, with each layer's cycles

With --run, vp_status is the firmware's exit status on kiln's virtual platform, vp_pmu_cycles the
NPU PMU's cycles of its first inference, vp_output_equal_host whether every output of every sample
equals `kiln run-host`'s bit for bit.

Rows hold only what the point determines: the same grid gives the same table byte for byte,
from the pool, from Ray or from the cache (a point's `seconds` is in results.json only).
Cycle counts are Vela's estimates; the virtual platform's NPU model follows Vela's performance
model, so its cycles are not a second, independent measurement.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

from kiln.sweep.points import Point

CYCLES_NOTE = (
    "Cycle counts are Vela's estimates (npu_cycles: the NPU's own; npu_total_cycles: with the memory accesses it "
    "waits for); latency_ms is Vela's inference time of the NPU's work, ops on the CPU not included. kiln's virtual "
    "platform counts NPU cycles with a model that follows Vela's performance model."
)

POINT_COLUMNS = ["model", "target", "board", "memory_mode", "activation_bits"]
FIGURE_COLUMNS = [
    "npu_cycles",
    "npu_total_cycles",
    "latency_ms",
    "sram_bytes",
    "flash_bytes",
    "pte_bytes",
    "delegates",
    "npu_macs_share",
]
PLATFORM_COLUMNS = ["vp_status", "vp_pmu_cycles", "vp_output_equal_host"]  # points run on the virtual platform
COLUMNS = ["key", *POINT_COLUMNS, "status", "reason", *FIGURE_COLUMNS, "cpu_ops", *PLATFORM_COLUMNS]


def row(key: str, record: dict) -> dict:
    """The table's row of a point's record (None for what the point has no figure of)."""
    point, figures = record["point"], record.get("figures") or {}
    out = {"key": key[:16]} | {c: point[c] for c in POINT_COLUMNS}
    out |= {"status": record["status"], "reason": record.get("reason")}
    out |= {c: figures.get(c) for c in FIGURE_COLUMNS}
    ops = figures.get("cpu_ops")
    out["cpu_ops"] = None if ops is None else "; ".join(f"{o['node']} ({o['op']}): {o['reason']}" for o in ops)
    vp = record.get("platform") or {}
    out |= {
        "vp_status": vp.get("status"),
        "vp_pmu_cycles": vp["pmu_cycles"][0] if vp.get("pmu_cycles") else None,
        "vp_output_equal_host": vp.get("output_equal_host"),
    }
    for region, entry in (figures.get("regions") or {}).items():
        out[f"region_{region}_bytes"] = entry["need"]
    return out


def columns(rows: list[dict]) -> list[str]:
    regions = sorted({c for r in rows for c in r if c not in COLUMNS})
    return [*COLUMNS, *regions]


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def csv_text(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns(rows), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


class Stream:
    """results.csv as points finish: rows appended and flushed one by one under the fixed columns
    (a region column appears in the final table, written by `finish`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        self._writer.writeheader()

    def add(self, row: dict) -> None:
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def finish(
    directory: Path, ordered: list[tuple[str, Point, dict]], profiled: list[tuple[str, Point, dict]] = ()
) -> tuple[Path, Path]:
    """results.csv and results.json of the finished sweep, in the grid's order; `profiled` (the
    points a budget chose, with their layers) go to results.json only, under "profiled"."""
    directory = Path(directory)
    rows = [row(key, record) for key, _, record in ordered]
    csv_path, json_path = directory / "results.csv", directory / "results.json"
    _atomic_write(csv_path, csv_text(rows))
    points = [{"key": key, **record} for key, _, record in ordered]
    extra = [{"key": key, **record} for key, _, record in profiled]
    text = json.dumps({"note": CYCLES_NOTE, "points": points, "profiled": extra}, indent=1)
    _atomic_write(json_path, text + "\n")
    return csv_path, json_path
