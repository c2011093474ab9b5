"""What a sweep's table answers.

    pareto(rows)            per model, the points no other point of that model beats: none is at
                            least as good in latency, SRAM and flash and better in one
    smallest(rows, ms)      the smallest configuration (target, board, memory mode, activation
                            bits) on which every model of the sweep compiles, fits and meets a
                            latency budget: fewest MACs, then least SRAM, flash, latency
    bottlenecks(layers, n)  a profiled point's n costliest layers by Vela's cycle estimate

Rows are kiln.sweep.table.row's dicts; only "ok" rows take part. Latency is Vela's estimate of the
NPU's time (latency_ms): a model's ops on the CPU are not in it (the table lists them).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln import boards

AXES = ("latency_ms", "sram_bytes", "flash_bytes")


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok" and all(r[a] is not None for a in AXES)]


def dominates(a: dict, b: dict) -> bool:
    """Whether `a` is at least as good as `b` on every axis and better on one."""
    return all(a[x] <= b[x] for x in AXES) and any(a[x] < b[x] for x in AXES)


def pareto(rows: list[dict]) -> dict[str, list[dict]]:
    """Model -> its Pareto-optimal rows, by latency then SRAM (equal figures: each kept)."""
    by_model: dict[str, list[dict]] = {}
    for r in _ok(rows):
        by_model.setdefault(r["model"], []).append(r)
    return {
        model: sorted((r for r in rs if not any(dominates(o, r) for o in rs)), key=lambda r: [r[x] for x in AXES])
        for model, rs in by_model.items()
    }


def configuration(r: dict) -> tuple:
    return (r["target"], r["board"], r["memory_mode"], r["activation_bits"])


@dataclass
class Choice:
    configuration: tuple  # (target, board, memory mode, activation bits)
    rows: list[dict]  # one per model, in the models' order
    macs: int

    @property
    def worst_latency_ms(self) -> float:
        return max(r["latency_ms"] for r in self.rows)


def smallest(rows: list[dict], budget_ms: float) -> tuple[Choice | None, str]:
    """The smallest configuration meeting `budget_ms` for every model, and a sentence saying why
    it is, or why there is none (the configuration that came closest)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    grouped: dict[tuple, dict[str, dict]] = {}
    for r in _ok(rows):
        grouped.setdefault(configuration(r), {})[r["model"]] = r
    complete = [
        Choice(c, [found[m] for m in models], boards.target(c[0], c[1]).macs)
        for c, found in grouped.items()
        if all(m in found for m in models)
    ]
    if not complete:
        return None, f"no configuration compiles and fits for every model ({', '.join(models)})"
    meeting = [c for c in complete if c.worst_latency_ms <= budget_ms]
    if not meeting:
        best = min(complete, key=lambda c: c.worst_latency_ms)
        return None, (
            f"no configuration meets {budget_ms:g} ms for every model; the fastest, {_name(best.configuration)}, "
            f"takes {best.worst_latency_ms:g} ms"
        )

    def size(c: Choice):
        return (c.macs, max(r["sram_bytes"] for r in c.rows), max(r["flash_bytes"] for r in c.rows), c.worst_latency_ms)

    chosen = min(meeting, key=size)
    return chosen, (
        f"{_name(chosen.configuration)}: the fewest MACs ({chosen.macs}), then the least SRAM, of the "
        f"{len(meeting)} configurations meeting {budget_ms:g} ms for every model (worst {chosen.worst_latency_ms:g} ms)"
    )


def _name(c: tuple) -> str:
    target, board, mode, bits = c
    return f"{target} on {board or 'its reference board'}, {mode or 'the default memory mode'}, {bits}-bit activations"


def bottlenecks(layers: list[dict], n: int = 5) -> list[dict]:
    """The n layers with the most Vela NPU cycles, each with its share of the point's total."""
    costed = [layer for layer in layers if layer.get("vela_npu_cycles")]
    total = sum(layer["vela_npu_cycles"] for layer in costed)
    top = sorted(costed, key=lambda layer: layer["vela_npu_cycles"], reverse=True)[:n]
    return [layer | {"share": round(layer["vela_npu_cycles"] / total, 4)} for layer in top]
