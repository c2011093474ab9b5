"""The pictures of `kiln profile` (kiln.reference.profile): timeline.png (NPU and CPU work per
layer in run order, the model's cycles beside Vela's per layer), memory.png (the memory map: the
NPU regions of each delegate with every tensor Vela placed in them over the operations that use
it, and the program's planned buffer) and profile.html, which shows both and the table.
matplotlib with its Agg backend: no display needed."""

from __future__ import annotations

import base64
import html
from pathlib import Path

NPU_COLOUR, VELA_COLOUR, CPU_COLOUR = "#2a7ab9", "#f29d38", "#9a9a9a"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _short(text: str, n: int = 34) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _tail(text: str, n: int) -> str:
    """`text`'s end (a module path's most specific part)."""
    return text if len(text) <= n else "…" + text[-(n - 1) :]


def _thousands(axis) -> None:
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))


def _rows(p) -> list:
    """The layers shown, in run order: each delegate's NPU layers on its timeline, the CPU ops
    where the program runs them."""
    by_name = {layer.name: layer for layer in p.layers}
    rows = []
    for kind, what in p.schedule:
        if kind == "cpu":
            rows.append(by_name[what])
        else:
            npu = [x for x in p.layers if x.delegate == what and (x.commands or x.vela_npu_cycles)]
            rows += sorted(npu, key=lambda x: x.start_cycle or 0)
    return rows


MAX_ROWS = 60  # a picture a person reads at a glance: the largest layers, the rest summed in the title


def _shown(rows: list) -> tuple[list, int, int]:
    """(the rows drawn, how many NPU layers were left out, their cycles): every CPU op and the
    NPU layers with the most cycles, MAX_ROWS in all, in run order."""
    npu = [x for x in rows if x.where == "npu"]
    room = MAX_ROWS - (len(rows) - len(npu))
    if len(npu) <= room:
        return rows, 0, 0
    kept = {id(x) for x in sorted(npu, key=lambda x: x.npu_cycles or 0, reverse=True)[: max(room, 1)]}
    left = [x for x in npu if id(x) not in kept]
    return [x for x in rows if x.where != "npu" or id(x) in kept], len(left), sum(x.npu_cycles or 0 for x in left)


def timeline(p, path: Path) -> Path:
    plt = _pyplot()
    rows, hidden, hidden_cycles = _shown(_rows(p))
    height = max(3.0, 0.32 * len(rows) + 1.6)
    fig, (gantt, bars) = plt.subplots(
        1, 2, figsize=(15, height), sharey=True, gridspec_kw={"width_ratios": [3, 2], "wspace": 0.04}
    )
    labels = [f"{_short(x.name, 26)}  [{_tail(x.module or '-', 20)}]" for x in rows]
    offset = 0  # cycles of the delegates before, on one NPU time axis
    delegate_base = {}
    for kind, what in p.schedule:
        if kind == "npu":
            delegate_base[what] = offset
            offset += p.delegates[what].pmu_cycles
    total = max(offset, 1)
    for y, layer in enumerate(rows):
        if layer.where == "npu":
            start = delegate_base.get(layer.delegate, 0) + (layer.start_cycle or 0)
            gantt.barh(y, max(layer.npu_cycles or 0, total * 0.002), left=start, color=NPU_COLOUR, height=0.7)
        else:
            # no duration measured: a marker at the point of the NPU timeline where it runs
            position = [s[1] for s in p.schedule].index(layer.name)
            before = sum(p.delegates[w].pmu_cycles for k, w in p.schedule[:position] if k == "npu")
            gantt.plot([before], [y], marker="D", color=CPU_COLOUR, markersize=7)
            late = before > total * 0.6
            said = (
                "CPU op (not measured)"
                if layer.cpu_instructions is None
                else f"CPU op: {layer.cpu_instructions:,} instructions"
            )
            gantt.text(
                before + (-1 if late else 1) * total * 0.015,
                y,
                said,
                va="center",
                ha="right" if late else "left",
                fontsize=7,
                color="#555",
            )
    gantt.set_yticks(range(len(rows)), labels, fontsize=8)
    gantt.invert_yaxis()
    gantt.set_xlabel("NPU cycles from the start of the inference (the NPU model's PMU estimate)")
    title = f"{p.model} on {p.target}: {p.total_npu_cycles:,} NPU cycles"
    if hidden:
        title += f"\n(the {len(rows)} largest layers shown; {hidden} smaller ones, {hidden_cycles:,} cycles, left out)"
    gantt.set_title(title, fontsize=11, loc="left")
    gantt.set_xlim(0, total * 1.02)
    gantt.grid(axis="x", alpha=0.3)
    _thousands(gantt.xaxis)
    ys = [y for y, x in enumerate(rows) if x.where == "npu"]
    model = [rows[y].npu_cycles or 0 for y in ys]
    vela = [rows[y].vela_npu_cycles or 0 for y in ys]
    bars.barh([y - 0.18 for y in ys], model, height=0.36, color=NPU_COLOUR, label="kiln's NPU model")
    bars.barh([y + 0.18 for y in ys], vela, height=0.36, color=VELA_COLOUR, label="Vela's estimate")
    top = max(model + vela + [1])
    for y, m, v in zip(ys, model, vela):
        if v:
            bars.text(max(m, v) + top * 0.01, y, f"{m / v:.2f}", va="center", fontsize=7)
    bars.set_xlim(0, top * 1.15)
    bars.set_xlabel("NPU cycles per layer (model / Vela)")
    bars.legend(loc="lower right", fontsize=8)
    bars.grid(axis="x", alpha=0.3)
    _thousands(bars.xaxis)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def memory(p, path: Path) -> Path:
    plt = _pyplot()
    from matplotlib.patches import Rectangle

    panels = len(p.delegates) + 1
    fig, axes = plt.subplots(1, panels, figsize=(7.5 * panels, 6), squeeze=False)
    colours = plt.get_cmap("tab20").colors
    for ax, d in zip(axes[0], p.delegates):
        layer_of = {op["name"]: op["layer"] for op in d.operations}  # Vela's OFM tensor -> kiln op
        tensors = [t for t in d.tensors if t.get("start_address")]
        end_time = max([int(t["end_time"]) for t in tensors] + [1])
        memories = sorted({t.get("memory", "?") for t in tensors})
        for i, t in enumerate(tensors):
            start, end = int(t["start_address"], 16), int(t["end_address"], 16)
            t0, t1 = int(t["start_time"]), int(t["end_time"])
            ax.add_patch(
                Rectangle(
                    (t0, start),
                    max(t1 - t0, 0.6),
                    max(end - start, 1),
                    facecolor=colours[i % 20],
                    edgecolor="black",
                    linewidth=0.5,
                    alpha=0.85,
                )
            )
        top = max([int(t["end_address"], 16) for t in tensors] + [d.scratch_bytes, 1])
        for t in tensors:  # labels where they fit: the kiln op that writes the tensor
            start, end = int(t["start_address"], 16), int(t["end_address"], 16)
            t0, t1 = int(t["start_time"]), int(t["end_time"])
            if end - start > 0.05 * top and t1 - t0 >= 0.02 * end_time:
                ax.text(
                    t0 + 0.2,
                    (start + end) / 2,
                    _short(layer_of.get(t["name"], t["name"]), 16),
                    fontsize=6.5,
                    va="center",
                    rotation=90 if t1 - t0 < 0.08 * end_time else 0,
                )
        ax.axhline(d.scratch_bytes, color="red", linestyle="--", linewidth=0.8)
        ax.text(0, d.scratch_bytes, f" scratch (region 1): {d.scratch_bytes:,} B", color="red", fontsize=7, va="bottom")
        ax.set_xlim(0, end_time + 1)
        ax.set_ylim(0, top * 1.08)
        ax.set_xlabel("Vela's operation time steps")
        ax.set_ylabel(f"offset in the scratch, {'/'.join(memories)} (bytes)")
        _thousands(ax.yaxis)
        ax.set_title(
            f"delegate {d.index}: tensors in the NPU's scratch\nweights (region 0) {d.weight_bytes:,} B, "
            f"fast scratch (region 2) {d.fast_scratch_bytes:,} B",
            fontsize=9,
            loc="left",
        )
    ax = axes[0][-1]
    if p.image:
        _image_map(ax, p.image, colours)
        fig.tight_layout()
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return path
    regions = [("planned buffers (CPU values)", p.planned_bytes)]
    regions += [(f"delegate {d.index} weights (region 0)", d.weight_bytes) for d in p.delegates]
    regions += [("NPU scratch (region 1)", max((d.scratch_bytes for d in p.delegates), default=0))]
    regions += [("NPU fast scratch (region 2)", max((d.fast_scratch_bytes for d in p.delegates), default=0))]
    names = [r[0] for r in regions]
    sizes = [r[1] for r in regions]
    ax.barh(range(len(regions)), sizes, color=[colours[(2 * i) % 20] for i in range(len(regions))])
    for y, size in enumerate(sizes):
        ax.text(size, y, f" {size:,} B", va="center", fontsize=8)
    ax.set_yticks(range(len(regions)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(sizes + [1]) * 1.3)
    ax.set_xlabel("bytes")
    _thousands(ax.xaxis)
    ax.set_title("regions of the image's memory (sizes)", fontsize=9, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _image_map(ax, image: dict, colours) -> None:
    """The firmware image's memory (a runner build's memory_report.json): per board memory
    region, what the image puts there, end to end: code and data, the .pte, each buffer, the
    stack."""
    rows = []
    for region, facts in image["regions"].items():
        parts = []
        pte = image.get("pte", {})
        code = facts.get("image", 0) - (pte.get("size", 0) if pte.get("region") == region else 0)
        if code > 0:
            parts.append(("code and data", code))
        if pte.get("region") == region:
            parts.append((".pte (NPU weights, program)", pte["size"]))
        placed = 0
        for buffer in image.get("buffers", []):
            if buffer["region"] == region:
                parts.append((buffer["what"], buffer["size"]))
                placed += buffer["size"]
        stack = image.get("stack", {})
        if stack.get("region") == region:
            parts.append(("main stack", stack["size"]))
            placed += stack["size"]
        rest = facts.get("uninitialised", 0) - placed
        if rest > 0:
            parts.append(("other bss", rest))
        if parts:
            rows.append((region, facts["size"], parts))
    names = sorted({name for _, _, parts in rows for name, _ in parts})
    colour = {name: colours[(2 * i) % 20] for i, name in enumerate(names)}
    top = max([sum(n for _, n in parts) for _, _, parts in rows] + [1])
    for y, (_region, size, parts) in enumerate(rows):
        left = 0
        for name, n in parts:
            ax.barh(y, n, left=left, color=colour[name], edgecolor="black", linewidth=0.4)
            if n > 0.08 * top:
                ax.text(left + n / 2, y, f"{n:,}", ha="center", va="center", fontsize=7)
            left += n
        ax.text(left, y, f"  {left:,} of {size:,} B", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.45)
    ax.set_xlabel("bytes used from the region's start (order as listed)")
    _thousands(ax.xaxis)
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=colour[n], label=n) for n in names],
        fontsize=7,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=3,
        frameon=False,
    )
    ax.set_title(f"the firmware image's memory by region ({image.get('memory_mode', '')})", fontsize=9, loc="left")


def write(p, output: Path, table: str) -> list[Path]:
    paths = [timeline(p, output / "timeline.png"), memory(p, output / "memory.png")]
    images = "".join(
        f'<h2>{title}</h2><img alt="{title}" style="max-width:100%" src="data:image/png;base64,'
        f'{base64.b64encode(path.read_bytes()).decode()}">'
        for title, path in (("Timeline", paths[0]), ("Memory map", paths[1]))
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>kiln profile: {html.escape(p.model)}</title>"
        "<style>body{font-family:sans-serif;margin:1.5em} pre{font-size:12px;background:#f6f6f6;padding:1em;"
        "overflow-x:auto}</style></head><body>"
        f"<h1>kiln profile: {html.escape(p.model)} on {html.escape(p.target)}</h1>"
        f"<pre>{html.escape(table)}</pre>{images}</body></html>\n"
    )
    (output / "profile.html").write_text(page)
    return paths + [output / "profile.html"]
