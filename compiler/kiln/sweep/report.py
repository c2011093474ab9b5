"""A sweep's outputs for people and tools: the terminal summary, report.html (plots and the table)
and, per point, the JSON that Arm's ML Inference Advisor writes (MLIA 0.12, output schema 1.2.0).

MLIA JSON (mlia/<point label>.json): schema_version "1.2.0"; run_id a UUID made from the point's
key; tool kiln; target (MLIA's target schema 1.0.0: profile_name, target_type, the NPU and the
board's CPU as components, the board, system config, memory mode and activation bits as its
configuration); model (name,
format "pte", hash: the .pte's SHA-256); context; backends (Vela, its version and configuration);
results[] one of kind "performance", producer "vela", mode "predicted", status "ok" (a point that
does not fit: "failed", one kiln refused: "incompatible", with errors), metrics (npu_cycles,
npu_total_cycles, inference_time in ms, sram_usage and flash_usage in bytes), and for a profiled
point breakdowns keyed by entity_id (each layer's Vela npu_cycles and kiln's NPU model's
cycles) with entities of kind "vela_performance_layer" (name, placement NPU or CPU, attributes:
op, module), the kind declared in entity_kinds. A point run on the virtual platform (--run) has a
second result, producer "kiln-virtual-platform", mode "simulated": the PMU's NPU cycles of its
first inference (the NPU model follows Vela's performance model), status "failed" where the
firmware failed or its outputs differ from run-host's (the differences as errors).
"""

from __future__ import annotations

import base64
import csv
import html
import importlib.metadata
import io
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

from kiln.sweep import analysis
from kiln.sweep.table import CYCLES_NOTE, csv_text

MLIA_SCHEMA_VERSION = "1.2.0"
LAYER_KIND = "vela_performance_layer"
MLIA_STATUS = {"ok": "ok", "does-not-fit": "failed", "refused": "incompatible", "error": "failed"}


def _metric(name: str, unit: str, value, missing: str = "the point did not compile") -> dict:
    if value is None:
        return {"name": name, "unit": unit, "availability": "unavailable", "reason": missing}
    return {"name": name, "unit": unit, "value": value}


def _layers(layers: list[dict]) -> tuple[list[dict], list[dict]]:
    breakdowns, entities = [], []
    for layer in layers:
        entities.append(
            {
                "id": layer["name"],
                "kind": LAYER_KIND,
                "name": layer["name"],
                "placement": layer["where"].upper(),
                "attributes": {"op": layer["op"], "module": layer["module"]},
            }
        )
        if layer["where"] == "npu":
            fused = "Vela costs this layer in another's figure (no operation of its own)"
            metrics = [_metric("npu_cycles", "cycles", layer["vela_npu_cycles"], fused)]
            metrics.append(_metric("kiln_npu_model_cycles", "cycles", layer["npu_cycles"]))
            breakdowns.append({"entity_id": layer["name"], "metrics": metrics})
    return breakdowns, entities


def _target(point: dict, figures: dict) -> dict:
    """MLIA's target object (its target schema 1.0.0): the NPU and the board's CPU as components."""
    from kiln import boards

    target = boards.target(point["target"], point["board"])
    family, model, variant = target.name.split("-")  # "ethos-u55-128" (kiln.boards' target names)
    core = target.board.cpu.core  # "cortex-m55"
    return {
        "profile_name": target.name,
        "target_type": f"{family}-{model}",
        "components": [
            {"type": "npu", "family": f"{family}-{model[0]}", "model": model, "variant": variant},
            {"type": "cpu", "family": core.rsplit("-", 1)[0], "model": core.rsplit("-", 1)[1]},
        ],
        "configuration": {
            "board": target.board.name,
            "system_config": figures.get("system_config") or target.system_config,
            "memory_mode": figures.get("memory_mode") or point["memory_mode"] or target.memory_mode,
            "activation_bits": point["activation_bits"],
        },
    }


def mlia_json(key: str, record: dict) -> dict:
    """The point's figures as MLIA 0.12 writes a performance check (see the module's docstring)."""
    point, figures = record["point"], record.get("figures") or {}
    status = record["status"]
    result = {
        "kind": "performance",
        "status": MLIA_STATUS[status],
        "producer": "vela",
        "mode": "predicted",
        "warnings": [CYCLES_NOTE],
        "metrics": [
            _metric("npu_cycles", "cycles", figures.get("npu_cycles")),
            _metric("npu_total_cycles", "cycles", figures.get("npu_total_cycles")),
            _metric("inference_time", "ms", figures.get("latency_ms")),
            _metric("sram_usage", "bytes", figures.get("sram_bytes")),
            _metric("flash_usage", "bytes", figures.get("flash_bytes")),
        ],
        "advice": [],
    }
    if status != "ok":
        result["errors"] = [record.get("reason") or status]
    if record.get("layers"):
        result["breakdowns"], result["entities"] = _layers(record["layers"])
        result["entity_kinds"] = [{"id": LAYER_KIND}]
    results = [result]
    vp = record.get("platform")
    if vp:  # the firmware run on the virtual platform: MLIA's FVP backend reports such a run's NPU cycles
        results.append(
            {
                "kind": "performance",
                "status": "ok" if vp["status"] == 0 and vp["output_equal_host"] else "failed",
                "producer": "kiln-virtual-platform",
                "mode": "simulated",
                "warnings": [CYCLES_NOTE],
                "errors": vp["differences"],
                "metrics": [_metric("npu_total_cycles", "cycles", vp["pmu_cycles"][0] if vp["pmu_cycles"] else None)],
            }
        )
    vela_version = importlib.metadata.version("ethos-u-vela")
    return {
        "schema_version": MLIA_SCHEMA_VERSION,
        "run_id": str(uuid.UUID(key[:32])),
        "timestamp": datetime.now(UTC).isoformat(),
        "tool": {"name": "kiln", "version": importlib.metadata.version("kiln")},
        "target": _target(point, figures),
        "model": {
            "name": Path(point["model"]).name,
            "format": "pte",
            "hash": figures.get("pte_sha256") or key,
        },
        "context": {"notes": CYCLES_NOTE, "runtime_configuration": dict(point)},
        "backends": [
            {
                "id": "vela",
                "name": "vela",
                "version": vela_version,
                "configuration": {"accelerator_config": point["target"], "memory_mode": point["memory_mode"]},
            }
        ],
        "results": results,
    }


def _fmt(value, unit="") -> str:
    if value is None:
        return "-"
    return f"{value:,}{unit}" if isinstance(value, int) else f"{value:g}{unit}"


def summary(rows: list[dict], budget: tuple | None = None, bottlenecks: list[dict] | None = None) -> str:
    """The terminal summary: points by status, each model's Pareto front, the budget's answer."""
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    lines = [f"{len(rows)} points: " + ", ".join(f"{n} {s}" for s, n in statuses.items())]
    for model, front in analysis.pareto(rows).items():
        lines.append(f"{model}: Pareto front (latency, SRAM, flash)")
        for r in front:
            where = f"{r['target']:<15} {r['board'] or '':<14} {r['memory_mode'] or 'default':<22}"
            figures = [_fmt(r["latency_ms"], " ms"), _fmt(r["sram_bytes"], " B"), _fmt(r["flash_bytes"], " B")]
            lines.append(f"  {where} a{r['activation_bits']:<3}" + "".join(f"{f:>12}" for f in figures))
    if budget is not None:
        choice, why = budget
        lines.append(("smallest configuration: " if choice else "budget: ") + why)
    for layer in bottlenecks or []:
        lines.append(
            f"  bottleneck {layer['model']}: {layer['name']} ({layer['op']}) {layer['vela_npu_cycles']:,} cycles, "
            f"{layer['share']:.0%} of the NPU's"
        )
    lines.append("(cycles and latency: Vela's estimates; kiln's virtual platform follows Vela's performance model)")
    return "\n".join(lines)


def _plotted(rows: list[dict], column: str) -> list[float]:
    return [r[column] for r in rows if r["status"] == "ok" and r[column] is not None]


def _plot(rows: list[dict], axis: str, label: str) -> str:
    """A PNG (base64) of latency against `axis`, one colour per model, the Pareto front joined; an
    axis whose values span more than a decade is logarithmic."""
    from kiln.reference.profile_plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for model, front in analysis.pareto(rows).items():
        ok = [r for r in rows if r["model"] == model and r["status"] == "ok"]
        dots = ax.scatter([r[axis] for r in ok], [r["latency_ms"] for r in ok], alpha=0.5, label=model)
        front = sorted(front, key=lambda r: r[axis])
        ax.plot([r[axis] for r in front], [r["latency_ms"] for r in front], color=dots.get_facecolor()[0])
    ax.set_xlabel(label)
    ax.set_ylabel("latency, ms (Vela's estimate)")
    for values, scale in ((_plotted(rows, axis), ax.set_xscale), (_plotted(rows, "latency_ms"), ax.set_yscale)):
        if values and min(values) > 0 and max(values) > 10 * min(values):
            scale("log")  # the zoo spans decades: a linear axis shows only its largest model
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(out.getvalue()).decode()


def write_html(path: Path, rows: list[dict], text: str) -> Path:
    """report.html: the summary, latency against SRAM and against flash, and the table."""
    plots = "".join(
        f'<img alt="latency against {label}" src="data:image/png;base64,{_plot(rows, axis, label)}">'
        for axis, label in (("sram_bytes", "SRAM, bytes"), ("flash_bytes", "flash, bytes"))
    )
    cells = [[html.escape(c) for c in r] for r in csv.reader(csv_text(rows).splitlines())]
    table = "<table><tr>" + "".join(f"<th>{c}</th>" for c in cells[0]) + "</tr>"
    table += "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in cells[1:]) + "</table>"
    page = (
        "<!doctype html><meta charset=utf-8><title>kiln sweep</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 4px}</style>"
        f"<h1>kiln sweep</h1><p>{html.escape(CYCLES_NOTE)}</p><pre>{html.escape(text)}</pre>{plots}{table}"
    )
    path.write_text(page)
    return path


def write_mlia(directory: Path, ordered: list[tuple]) -> list[Path]:
    """One MLIA JSON per point under `directory`/mlia/."""
    out = []
    for key, point, record in ordered:
        path = Path(directory) / "mlia" / f"{point.label}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(mlia_json(key, record), indent=1) + "\n")
        out.append(path)
    return out
