"""`kiln profile --etdump FILE`: the runner's ETDump, ExecuTorch's profiling format, on the host.

The device writes it (firmware/apps/executor_runner/etdump_profiling.cpp, the app
executor_runner_etdump): one RunData "Execute" per inference; per delegate call one ProfileEvent
per NPU layer and one DELEGATE_CALL, timed in NPU cycles by the NPU's PMU cycle counter (a
layer's span: its share of the call's measured cycles, by the cycles kiln's NPU model accounts
to it). This module gives the device what it cannot know itself, and takes the result back:

    layers_source(p, owners)   etdump_layers.cpp: per delegate, the program instruction that calls
                               it and its NPU layers in run order, labelled "MODULE OP" (a layer of
                               no module: its node's name), with the cycles kiln profile gives them
    collect(uart)              the ETDump's bytes from the UART lines the runner printed

The file opens in ExecuTorch's devtools Inspector with cycles as its time scale (INSPECTOR)."""

from __future__ import annotations

import base64
import re

from kiln.errors import RunnerError

# etdump_profiling.cpp's lines around the base64
BEGIN_LINE = re.compile(r"^ETDump: (\d+) bytes, (\d+) run\(s\), times in NPU cycles \(base64 follows\)$")
END_LINE = "ETDump end"
RUNNER_NOTE = "runner: ETDump:"  # what the runner says when its record is incomplete or unwritten
INSPECTOR = "Inspector(etdump_path=FILE, source_time_scale=TimeScale.CYCLES, target_time_scale=TimeScale.CYCLES)"
MAX_CYCLES = 2**32 - 1  # a delegate's layers' cycles, summed (etdump_layers.h)


def layer_labels(p) -> dict[int, list[tuple[str, int]]]:
    """Per delegate index of Profile `p`: its NPU layers that ran commands, in run order, as
    (label, NPU cycles). The label is "MODULE OP" (the node's name for a layer of no module),
    with " [NODE]" added where two layers of a delegate would share it."""
    delegates: dict[int, list] = {d.index: [] for d in p.delegates}
    for layer in sorted(
        (x for x in p.layers if x.where == "npu" and x.commands), key=lambda x: (x.delegate, x.start_cycle or 0)
    ):
        delegates[layer.delegate].append(layer)
    labelled = {}
    for index, layers in delegates.items():
        labels = [f"{layer.module or layer.name} {layer.op}" for layer in layers]
        labels = [
            f"{label} [{layer.name}]" if labels.count(label) > 1 else label for label, layer in zip(labels, layers)
        ]
        labelled[index] = [(label, int(layer.npu_cycles or 0)) for label, layer in zip(labels, layers)]
    return labelled


def _c_string(text: str) -> str:
    return (
        '"'
        + "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else f"\\{ord(c):03o}" for c in text)
        + '"'
    )


def layers_source(p, owners: list[tuple[str, object]]) -> str:
    """etdump_layers.cpp (firmware/apps/executor_runner/etdump_layers.h) for Profile `p` of a program
    whose instructions are `owners` (kiln.reference.profile.instruction_owners: ("npu", delegate)
    for a delegate call)."""
    calls = {what: i for i, (kind, what) in enumerate(owners) if kind == "npu"}
    lines = ['#include "etdump_layers.h"', "", "namespace kiln::runner::etdump_layers {", "namespace {"]
    entries = []
    for index, layers in sorted(layer_labels(p).items()):
        total = sum(cycles for _, cycles in layers)
        if total > MAX_CYCLES:
            raise RunnerError(
                f"delegate {index}'s layers account {total:,} NPU cycles; the ETDump table holds 2^32 - 1"
            )
        rows = ", ".join(f"{{{_c_string(label)}, {cycles}u}}" for label, cycles in layers) or "{nullptr, 0u}"
        lines.append(f"const Layer kLayers{index}[] = {{{rows}}};")
        entries.append(f"{{{calls.get(index, -1)}, kLayers{index}, {len(layers)}u, {total}u}}")
    lines += [
        "}  // namespace",
        "",
        f"const Delegate kDelegates[] = {{{', '.join(entries) or '{-1, nullptr, 0u, 0u}'}}};",
    ]
    lines += [f"const uint32_t kDelegateCount = {len(entries)};", "", "}  // namespace kiln::runner::etdump_layers", ""]
    return "\n".join(lines)


def collect(uart: list[str]) -> bytes:
    """The ETDump the runner printed among `uart`'s lines (its base64 between BEGIN_LINE and
    END_LINE). A RunnerError when the runner said its record is incomplete or unwritten, or printed
    none, or the bytes are not the length it announced."""
    notes = [line for line in uart if line.startswith(RUNNER_NOTE)]
    if notes:
        raise RunnerError(f"the runner's ETDump is incomplete: {' | '.join(notes)}")
    begin = next((i for i, line in enumerate(uart) if BEGIN_LINE.match(line)), None)
    if begin is None or END_LINE not in uart[begin:]:
        raise RunnerError("the runner printed no ETDump (is the ELF the ETDump runner, executor_runner_etdump?)")
    end = uart.index(END_LINE, begin)
    length = int(BEGIN_LINE.match(uart[begin]).group(1))
    try:
        data = base64.b64decode("".join(uart[begin + 1 : end]), validate=True)
    except ValueError as error:
        raise RunnerError(f"the runner's ETDump is not base64: {error}") from None
    if len(data) != length:
        raise RunnerError(f"the runner announced a {length:,}-byte ETDump and printed {len(data):,} bytes")
    return data
