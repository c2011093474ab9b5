"""The size and memory report of a runner build (kiln.firmware.runner_build.build_runner):
memory_report.txt and memory_report.json beside the ELF's build.

What each board region holds (from the ELF's sections), the buffers planned from the .pte files
(each model's .pte and planned buffers, and what the models of an image share: the NPU's scratches
and the delegate pool), how the methods of a program share its planned buffers, and the image by
part (the runtime core by its parts, from the linker map).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from kiln import boards
from kiln.pte.schema import STATE_MEMORY_ID

# The plan and its models are kiln.firmware.runner_build's Plan and Model (runner_build calls
# report(); this module does not import it back).

# The runtime core's parts, by the archive and object an input section comes from: the
# loader (Program::load's verification pass and Program's accessors), the executor (Method),
# the Ethos-U delegate and the driver. The runtime core is their sum. The first part with a
# marker in the origin is its part.
CORE = "runtime core"
CORE_PARTS = (
    ("loader", ("libkiln_runtime.a(fb.cpp", "libkiln_runtime.a(program.cpp")),
    ("executor", ("libkiln_runtime.a(",)),  # method.cpp, support.cpp
    ("delegate", ("libkiln_delegate_ethosu.a(",)),
    ("driver", ("libkiln_ethosu.a(",)),
)
# The other parts of the image, by archive (else: the runner app). The error text (every
# error's name and the printer) is linked beside the core for the UART.
OTHER_PARTS = (
    ("error text", ("libkiln_error_text.a",)),
    ("platform", ("libkiln_platform.a",)),
    ("kernels", ("libkiln_kernels.a", "kernel_table")),
    ("model", ("model_pte", "model_memory")),
    ("C/C++ library", ("libc", "libgcc", "libstdc++", "libm", "libnosys")),
)
# The parts the report shows, in order (the runtime core as one, the sum of its parts).
PARTS = ((CORE, tuple(marker for _, markers in CORE_PARTS for marker in markers)), *OTHER_PARTS)


def _part(origin: str) -> str:
    """The part an input object belongs to: one of the runtime core's, another, or the app."""
    for part, markers in CORE_PARTS + OTHER_PARTS:
        if any(marker in origin for marker in markers):
            return part
    return "runner app"


_MAP_LINE = re.compile(r"^\s*(\.\S+)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S+\.(?:o|obj|a\(.*\)))\s*$")


def _map_parts(map_text: str, regions: list[boards.MemoryRegion]) -> dict:
    """Bytes per (region, part, kind) from the linker map's input sections; kind is
    "code" (text/rodata), "data" (initialised) or "bss"; the runtime core's by its parts."""
    usage: dict = {}
    section = None
    in_map = False
    for line in map_text.splitlines():
        if line.startswith("Linker script and memory map"):
            in_map = True
            continue
        if not in_map:
            continue
        stripped = line.strip()
        if stripped.startswith(".") and len(stripped.split()) == 1:
            section = stripped  # a long input-section name on its own line
            continue
        m = _MAP_LINE.match(line)
        if not m:
            section = None
            continue
        name, address, size, origin = m.group(1) or section or "", int(m.group(2), 16), int(m.group(3), 16), m.group(4)
        section = None
        if size == 0 or address == 0:
            continue
        region = next((r.name for r in regions if r.base <= address < r.end), None)
        if region is None:
            continue
        if name.endswith("model_pte"):
            continue  # the .pte: reported on its own line
        kind = "bss" if ".bss" in name or "COMMON" in name else ("data" if ".data" in name else "code")
        key = (region, _part(origin), kind)
        usage[key] = usage.get(key, 0) + size
    return usage


def _region_usage(elf: Path, regions: list[boards.MemoryRegion]) -> dict[str, dict[str, int]]:
    """Loaded (image) and zero-initialised/uninitialised bytes per region, from the ELF's sections."""
    size_tool = shutil.which("arm-none-eabi-size") or "arm-none-eabi-size"
    text = subprocess.run([size_tool, "-A", "-x", str(elf)], capture_output=True, text=True, check=True).stdout
    usage = {r.name: {"image": 0, "uninitialised": 0} for r in regions}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[0].startswith("."):
            continue
        name, size, address = parts[0], int(parts[1], 16), int(parts[2], 16)
        region = next((r.name for r in regions if r.base <= address < r.end), None)
        if region is None or size == 0:
            continue
        kind = "uninitialised" if name.endswith("bss") or name == ".stack" else "image"
        usage[region][kind] += size
    return usage


def _state_arena(m) -> dict | None:
    """The state arena's buffer (memory id STATE_MEMORY_ID) when a method of the program plans one."""
    if len(m.planned) < STATE_MEMORY_ID:
        return None
    b = m.planned[STATE_MEMORY_ID - 1]
    return {"size": b.size, "region": b.region}


def _methods_report(m) -> str:
    """The report's lines on a program of several methods: what each plans, and how the runner
    shares the planned buffers among them."""
    names = ", ".join(method.name for method in m.methods)
    lines = [
        f"methods: {names}: the apps run one at a time (each one's outputs read before the next runs), so "
        "planned buffer 1 (activations) is one buffer, the largest method's"
    ]
    arena = _state_arena(m)
    if arena is not None:
        lines.append(
            f"  state arena (planned buffer {STATE_MEMORY_ID}) {arena['size']:,} bytes in {arena['region']}, "
            "shared by every method, zeroed before the first runs"
        )
    for method in m.methods:
        planned = ", ".join(f"{size:,}" for size in method.planned) or "none"
        lines.append(
            f"  {method.name:<16} planned {planned}; {method.values:,} values, {method.operators} operators, "
            f"{method.delegates} delegates"
        )
    return "\n".join(lines)


def _models_report(p) -> list[str]:
    """An image of several models: each one's share, and what they share."""
    shared = [b for b in (p.scratch, p.fast_scratch) if b is not None]
    lines = [
        f"models: {', '.join(m.name for m in p.models)}: the runner binds each once and runs one at a time, so "
        "they share the NPU's scratch, the kernel table and the delegate pool; each keeps its own planned "
        "buffers (its outputs and state survive the others' runs)"
    ]
    for m in p.models:
        own = sum(b.size for b in m.planned)
        lines.append(
            f"  {m.name:<16} .pte {m.size:,} in {p.pte_region}; planned {own:,}; "
            f"{len(m.methods)} method(s), {m.delegates} delegate(s)"
        )
    lines.append(
        "  shared           "
        + (", ".join(f"{b.what.split(',')[0]} {b.size:,} in {b.region}" for b in shared) or "no NPU scratch")
        + f"; {p.delegates} delegate state(s), {len(p.operators)} operator(s) in the kernel table"
    )
    return lines


def _buffer_lines(p) -> list[str]:
    lines = ["buffers planned from the .pte:" if len(p.models) == 1 else "buffers planned from the .pte files:"]
    for m in p.models:
        what = "the .pte (weights, command streams)" if len(p.models) == 1 else f"{m.name}.pte"
        lines.append(f"  {what:<40} {m.size:>11,}  {p.pte_region}")
        if m.file_size != m.size:
            lines.append(
                f"    as baked: the {m.file_size:,}-byte file less {m.file_size - m.size:,} bytes of "
                "run-host's reference TOSA graphs"
            )
    for b in p.buffers():
        lines.append(f"  {b.what:<40} {b.size:>11,}  {b.region}")
    stack_region = p.target.board.region_for("stack").name
    lines.append(f"  {'main stack (board.toml, or the override)':<40} {p.stack_size:>11,}  {stack_region}")
    return lines


def _model_json(m) -> dict:
    return {
        "name": m.name,
        "pte": {"size": m.size, "file_size": m.file_size},
        "planned": [{"what": b.what, "size": b.size, "region": b.region} for b in m.planned],
        "methods": [
            {
                "name": method.name,
                "planned": list(method.planned),
                "values": method.values,
                "operators": method.operators,
                "delegates": method.delegates,
            }
            for method in m.methods
        ],
        "state_arena": _state_arena(m),
    }


def report(p, elf: Path, out: Path, title: str) -> str:
    """Writes memory_report.txt and .json into `out` and returns the text; `title`: the app's
    banner words ("kiln executor runner")."""
    regions = list(p.target.board.memory)
    usage = _region_usage(elf, regions)
    parts = _map_parts(elf.with_suffix(".map").read_text(), regions)
    lines = [
        f"{title}: {p.model} for {p.target.name} on {p.target.board.name} "
        f"({f'{p.system_config}, {p.memory_mode}' if p.memory_mode else 'the CPU alone, no NPU'})",
        f"  ELF {elf}",
        "",
        "memory per region (bytes):",
    ]
    for r in regions:
        u = usage[r.name]
        used = u["image"] + u["uninitialised"]
        if used == 0:
            continue
        lines.append(
            f"  {r.name:<6} {used:>11,} of {r.size:>11,} ({100 * used / r.size:5.1f} %)  "
            f"image {u['image']:,}, uninitialised {u['uninitialised']:,}"
        )
    lines += ["", *_buffer_lines(p)]
    if len(p.models) > 1:
        lines += ["", *_models_report(p)]
    for m in p.models:
        if len(m.methods) > 1:
            lines += ["", _methods_report(m)]
    lines += ["", "image by part, bytes (code = text + rodata; data = initialised; the .pte apart):"]
    core_names = [name for name, _ in CORE_PARTS]
    totals: dict[str, dict[str, int]] = {}  # per part, the runtime core as one
    core: dict[str, dict[str, int]] = {}  # per part of the runtime core
    for (_region, part, kind), size in parts.items():
        for table, name in ((core, part), (totals, CORE)) if part in core_names else ((totals, part),):
            table.setdefault(name, {"code": 0, "data": 0, "bss": 0})[kind] += size

    def line(name: str, t: dict[str, int], indent: str = "  ") -> str:
        return f"{indent}{name:<{18 - len(indent)}} code {t['code']:>10,}  data {t['data']:>8,}  bss {t['bss']:>10,}"

    for part in [name for name, _ in PARTS] + ["runner app"]:
        if part in totals:
            lines.append(line(part, totals[part]))
        if part == CORE:
            lines += [line(name, core[name], "    ") for name in core_names if name in core]
    pte_what = "the .pte" if len(p.models) == 1 else "the .pte files"
    lines.append(f"  {pte_what:<16} {p.pte_size:>15,}  in {p.pte_region}")
    text = "\n".join(lines) + "\n"
    (out / "memory_report.txt").write_text(text)
    models = [_model_json(m) for m in p.models]
    image = {
        "model": p.model,
        "target": p.target.name,
        "memory_mode": p.memory_mode,
        "elf": str(elf),
        "regions": {r.name: {"size": r.size, **usage[r.name]} for r in regions},
        "buffers": [{"what": b.what, "size": b.size, "region": b.region} for b in p.buffers()],
        "pte": {
            "size": p.pte_size,
            "region": p.pte_region,
            "file_size": sum(m.file_size for m in p.models),
            "reference_data_left_out": sum(m.file_size - m.size for m in p.models),
        },
        "stack": {"size": p.stack_size, "region": p.target.board.region_for("stack").name},
        "models": models,
        "shared": [
            {"what": b.what, "size": b.size, "region": b.region} for b in (p.scratch, p.fast_scratch) if b is not None
        ],
        "parts": totals,
        "core_parts": {name: core[name] for name in core_names if name in core},
    }
    if len(p.models) == 1:  # an image of one model: its methods and state arena at the top level too
        image["methods"], image["state_arena"] = models[0]["methods"], models[0]["state_arena"]
    (out / "memory_report.json").write_text(json.dumps(image, indent=2) + "\n")
    return text
