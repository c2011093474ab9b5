"""SUPPORTED_OPS.md, generated from the support rules: which ops may run on the NPU and what
each NPU family checks of them.

    python -m kiln.partition.supported_ops --output docs/SUPPORTED_OPS.md

tests/compiler/test_supported_ops.py fails when the committed file differs from this output.
"""

from __future__ import annotations

import re
import sys

from kiln import boards
from kiln.errors import document_command
from kiln.families import NpuFamily
from kiln.partition.support import RULES, Rule
from kiln.vocabulary import LOWERED

PROG = "python -m kiln.partition.supported_ops"
COMMAND = f"{PROG} --output docs/SUPPORTED_OPS.md"


def families() -> list[NpuFamily]:
    """The NPU families the boards describe (ethos-u55, ethos-u65, ethos-u85), by name."""
    return sorted({t.npu for t in boards.targets().values() if t.npu is not None}, key=lambda family: family.name)


def _text(rule: Rule) -> str:
    """The rule's reason, its fields (filled in from the op in a report) in italics."""
    escaped = rule.text.replace("\\", "\\\\").replace("*", "\\*").replace("|", "\\|")
    return re.sub(r"\{([^}]*)\}", r"*\1*", escaped)


def _table(rules: list[Rule], columns: list[NpuFamily]) -> list[str]:
    short = [family.name.removeprefix("ethos-").upper() for family in columns]
    lines = [
        f"| Rule: the op stays on the CPU with this reason when it fails | {' | '.join(short)} |",
        "|---|" + "---|" * len(columns),
    ]
    for r in rules:
        cells = ["checked" if r.checked_on(family) else "-" for family in columns]
        lines.append(f"| {_text(r)} (`{r.name}`) | {' | '.join(cells)} |")
    return lines


def markdown() -> str:
    columns = families()
    general = [r for r in RULES if r.ops is None]
    groups: dict[tuple[str, ...], list[str]] = {}  # names of the op-specific rules -> ops
    for target in sorted(LOWERED, key=str):
        specific = tuple(r.name for r in RULES if r.ops is not None and target in r.ops)
        groups.setdefault(specific, []).append(str(target))
    by_name = {r.name: r for r in RULES}
    lines = [
        "# Operators on the Ethos-U NPU",
        "",
        f"Generated from kiln's support rules (compiler/kiln/partition/support.py) by `{COMMAND}`;",
        "do not edit: tests/compiler/test_supported_ops.py fails when this file is stale.",
        "",
        "An op of kiln's graph runs on the NPU when it is one of the operators below, quantized, and every",
        "rule that applies to it holds on the target's NPU family. Otherwise it stays on the CPU and the",
        "compile report gives the first rule that failed, its fields (in italics here) filled in from the op.",
        "Quantize and dequantize always run on the CPU: they convert between the program's float values",
        "and integers. Columns: the NPU families of the boards in boards/.",
        "",
        "## Every operator",
        "",
        *_table(general, columns),
    ]
    for specific, ops in sorted(groups.items(), key=lambda item: (not item[0], item[1][0])):
        lines += ["", "## " + ", ".join(f"`{op}`" for op in ops), ""]
        if specific:
            lines += _table([by_name[n] for n in specific], columns)
        else:
            lines.append("Only the rules for every operator.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return document_command(PROG, "Writes SUPPORTED_OPS.md from kiln's support rules.", markdown, argv)


if __name__ == "__main__":
    sys.exit(main())
