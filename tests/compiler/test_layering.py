"""The package's dependencies point one way, read from its source with ast.

Compiler stages, in order: frontend -> graph -> partition -> lower -> program -> pte ->
firmware -> reference. A stage imports earlier stages and the foundation (errors, isolation,
paths, boards, spec, the operator vocabulary, the NPU families; the model zoo; the data model of
ExecuTorch's file format, kiln.pte.schema, which imports nothing of kiln's, while its reader and
writer are the pte stage), never a later stage. The compile driver (compile, checks) comes after
every stage, then the one way to run firmware (flow: compile -> build -> run -> compare, and
profile), then the command line. The simulator imports only kiln.errors, kiln.isolation,
kiln.paths, kiln.boards and its own modules; of the compiler, only reference, flow and the
command line import it. No module imports itself through others, within a layer either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = (ROOT / "compiler", ROOT / "simulator", ROOT / "models")

FOUNDATION = 0
STAGES = (
    "kiln.frontend",
    "kiln.graph",
    "kiln.partition",
    "kiln.lower",
    "kiln.program",
    "kiln.pte",
    "kiln.firmware",
    "kiln.reference",
)
RANKS = {
    "kiln": FOUNDATION,
    "kiln.errors": FOUNDATION,
    "kiln.isolation": FOUNDATION,
    "kiln.paths": FOUNDATION,
    "kiln.boards": FOUNDATION,
    "kiln.families": FOUNDATION,
    "kiln.vocabulary": FOUNDATION,
    "kiln.spec": FOUNDATION,
    "kiln.models": FOUNDATION,
    "kiln.pte.schema": FOUNDATION,
    **{stage: rank for rank, stage in enumerate(STAGES, start=1)},
    "kiln.compile": len(STAGES) + 1,
    "kiln.checks": len(STAGES) + 1,
    "kiln.flow": len(STAGES) + 2,
    "kiln.sweep": len(STAGES) + 3,
    "kiln.cli": len(STAGES) + 4,
}
SIMULATOR = "kiln.simulator"
SIMULATOR_MAY_IMPORT = ("kiln.errors", "kiln.isolation", "kiln.paths", "kiln.boards")
MAY_IMPORT_SIMULATOR = ("kiln.reference", "kiln.flow", "kiln.cli")


# Import cycles still in the tree, each to be removed, then deleted here:
# - kiln.simulator.npu.output <-> npu.u85_output: issue 27's simulator work (one object per NPU family)
#   removes it;
# - kiln.boards <-> kiln.boards.command: command.main() imports the package for its docstring (--help).
def modules() -> dict[str, Path]:
    """Every module of the kiln package, by dotted name."""
    found = {}
    for root in SOURCE_ROOTS:
        for path in sorted((root / "kiln").rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def imports(name: str, source: str, known) -> set[str]:
    """The kiln modules `source` (module `name`) imports, at any depth (lazy imports too)."""
    package = name if known.get(name, Path()).name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if _within(m, "kiln")}


def rank(name: str) -> int | None:
    """The layer of a compiler module: the rank of its longest listed prefix."""
    best = max((p for p in RANKS if _within(name, p)), key=len, default=None)
    return RANKS[best] if best is not None else None


def violations(name: str, imported: set[str]) -> list[str]:
    found = []
    if _within(name, SIMULATOR):
        for m in sorted(imported):
            if not _within(m, SIMULATOR) and m not in SIMULATOR_MAY_IMPORT and m != "kiln":
                found.append(f"{name} (simulator) imports compiler internals: {m}")
        return found
    own = rank(name)
    for m in sorted(imported):
        if _within(m, SIMULATOR):
            if not any(_within(name, p) for p in MAY_IMPORT_SIMULATOR):
                found.append(f"{name} imports the simulator ({m}); only reference, flow and the command line may")
        elif rank(m) is None:
            found.append(f"{name} imports {m}, which has no layer in tests/compiler/test_layering.py")
        elif rank(m) > own:
            found.append(f"{name} (layer {own}) imports {m} (layer {rank(m)}), a later stage")
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The modules of `graph` (module -> the modules it imports) that import themselves through
    others: its strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(name: str):
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in sorted(graph.get(name, ())):
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = {stack.pop()}
            while name not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(component)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {m for m in imports(name, path.read_text(), known) if m in known and m != name}
        for name, path in known.items()
    }


def test_every_module_has_a_layer():
    unplaced = [name for name in modules() if not _within(name, SIMULATOR) and rank(name) is None]
    assert not unplaced, f"add these to RANKS: {unplaced}"


def test_dependencies_point_one_way():
    known = modules()
    found = []
    for name, path in known.items():
        found += violations(name, imports(name, path.read_text(), known))
    assert not found, "\n".join(found)


def test_no_module_imports_itself_through_others():
    cycles = [sorted(c) for c in import_cycles(import_graph())]
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_checker_finds_a_cycle_within_a_layer():
    graph = {
        "kiln.frontend.a": {"kiln.frontend.b"},
        "kiln.frontend.b": {"kiln.frontend.c"},
        "kiln.frontend.c": {"kiln.frontend.a", "kiln.errors"},
        "kiln.frontend.d": {"kiln.frontend.a"},
        "kiln.errors": set(),
    }
    assert import_cycles(graph) == [{"kiln.frontend.a", "kiln.frontend.b", "kiln.frontend.c"}]
    assert import_cycles({"kiln.x": {"kiln.y"}, "kiln.y": set()}) == []


@pytest.mark.parametrize(
    "name, source, broken",
    [
        ("kiln.partition.support", "from kiln.lower.tosa import LOWERINGS", "kiln.lower.tosa (layer 4), a later stage"),
        ("kiln.spec", "from kiln.frontend import quantizer", "kiln.frontend.quantizer (layer 1), a later stage"),
        (
            "kiln.program.kernels",
            "def f():\n    from kiln.pte import from_program\n",
            "kiln.pte.from_program (layer 6)",
        ),
        ("kiln.program.builder", "from kiln.pte.reader import deserialize", "kiln.pte.reader (layer 6)"),
        ("kiln.simulator.npu.standalone", "import kiln.lower.ethosu_payload", "compiler internals: kiln.lower"),
        ("kiln.pte.from_program", "from kiln.simulator.npu import standalone", "imports the simulator"),
    ],
)
def test_the_checker_finds_a_backward_import(name, source, broken):
    """The rules above are not vacuous: one known-bad import of each kind is reported."""
    found = violations(name, imports(name, source, modules()))
    assert len(found) == 1 and broken in found[0], found


def test_allowed_imports_pass_the_checker():
    known = modules()
    for name, source in [
        ("kiln.program.kernels", "from kiln.pte.schema import ScalarType"),
        ("kiln.lower.tosa", "from kiln.partition.partitioner import Partition"),
        ("kiln.reference.run_host", "from kiln.simulator.npu.standalone import run_compiled"),
        ("kiln.simulator.npu.cycles", "from kiln import boards"),
    ]:
        assert violations(name, imports(name, source, known)) == [], (name, source)


def test_compiler_results_are_what_the_simulator_takes(tmp_path):
    """The simulator's public interface (kiln.simulator.npu.compiled) is met by the compiler's
    Vela result and by a decoded delegate payload, without the simulator importing either."""
    from kiln.lower import ethosu_payload
    from kiln.lower.vela import VelaResult
    from kiln.simulator.npu.compiled import CompiledNpuProgram, NpuTensor

    io = ethosu_payload.IoTensor((1, 1, 1, 1, 1, 16), 1, 0, 1)
    payload = ethosu_payload.decode(ethosu_payload.encode(b"COP1" + bytes(12), b"w", 64, [io], [io]))
    result = VelaResult(b"COP1", b"", 64, 0, (io,), (io,), 0, 0, 0.0, 0, 0, {})
    for compiled in (payload, result):
        assert isinstance(compiled, CompiledNpuProgram)
        assert all(isinstance(t, NpuTensor) for t in (*compiled.inputs, *compiled.outputs))


def test_running_firmware_does_not_load_the_compiler():
    """`kiln run`, `kiln deploy`'s run and the end-to-end tests import kiln.flow and the CLI; the
    compiler (torch, torchao, Vela's Python) loads only where a function compiles or profiles,
    so a run starts in a fraction of a second rather than after seconds of imports."""
    import subprocess
    import sys

    probe = "import sys, kiln.cli, kiln.flow; print(sorted(m for m in ('torch', 'torchao') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
