"""kiln.families, the one table of what sets the NPU families apart: every row names a test that
exists and is used by a stage, and no stage below the command line tests a target's name."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from kiln import boards, families

ROOT = Path(__file__).resolve().parents[2]
COMPILER = ROOT / "compiler" / "kiln"


def row_constants() -> dict[str, families.Row]:
    """The module-level names of kiln.families' rows."""
    return {name: value for name, value in vars(families).items() if isinstance(value, families.Row)}


def names_used(path: Path) -> set[str]:
    """The names a module reads (x, m.x) or imports (from m import x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found.update(alias.name for alias in node.names)
    return found


def code_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_every_row_has_a_name_of_its_own():
    constants = row_constants()
    assert sorted(constants.values(), key=id) == sorted(families.ROWS, key=id)
    assert len({row.name for row in families.ROWS}) == len(families.ROWS)
    assert all(row.families <= set(families.NAMES) and row.why.endswith(".") for row in families.ROWS)


def test_every_row_is_used_by_a_stage():
    used = set().union(*(names_used(path) for path in COMPILER.rglob("*.py") if path.name != "families.py"))
    unused = sorted(name for name in row_constants() if name not in used)
    assert not unused, f"rows of kiln.families no stage asks for: {unused}"


def test_every_rows_test_exists():
    ids = sorted({row.test for row in families.ROWS})
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ids],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    collected = {line.split("[")[0] for line in run.stdout.splitlines() if "::" in line}
    missing = [test for test in ids if test not in collected]
    assert run.returncode == 0 and not missing, (missing, run.stdout[-2000:], run.stderr[-2000:])


def test_each_target_has_its_familys_rows():
    """boards.Target.npu is the family of the target's name, with the rows that name that family."""
    for name, target in boards.targets().items():
        family = target.npu
        if family is None:  # a CPU alone: named by its board's core
            assert name == target.board.cpu.core and not target.has_npu
            continue
        assert name.startswith(family.name + "-")
        assert family.rows == {row.name for row in families.ROWS if family.name in row.families}
    assert boards.target("ethos-u85-256").npu.has(families.DMA_GATHERS)
    assert not boards.target("ethos-u55-128").npu.has(families.DMA_GATHERS)


def test_the_choices_keep_the_names_reports_give_them():
    """A compile report's delegates list the choices flipped by these names (flipped_choices)."""
    assert set(families.CHOICES) == {
        "pooled_means",
        "fused_exps",
        "rank4_transposes",
        "vela_strided_pools",
        "flat_strided_slices",
    }


def test_a_choice_is_taken_by_its_first_guess_unless_flipped():
    u65, u85 = families.FAMILIES[families.U65], families.FAMILIES[families.U85]
    choice = families.POOLED_MEANS  # the first guess on Ethos-U85 only
    assert u85.takes(choice, frozenset()) and not u65.takes(choice, frozenset())
    assert not u85.takes(choice, frozenset({choice.name})) and u65.takes(choice, frozenset({choice.name}))
    assert u85.takes(choice, frozenset({families.FUSED_EXPS.name}))


def test_no_lowering_or_support_rule_tests_a_target_name():
    """The lowering and the partition stage ask the NpuFamily; a target's name ("ethos-u55-128")
    reaches only Vela's command line (kiln.lower.vela) and the messages about it."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for folder in ("lower", "partition")
        for path in sorted((COMPILER / folder).glob("*.py"))
        for line, text in code_strings(path)
        if "ethos-u" in text
    ]
    assert not found, "\n".join(found)
