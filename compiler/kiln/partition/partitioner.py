"""Splits kiln's graph into NPU partitions and CPU ops.

An op goes to the NPU when no support rule and no user exclusion stops it.
Supported ops join the partition of a supported producer unless that would
make a cycle (a path from the partition through the CPU back into it), so each
partition can run as one delegate call. The result lists every op with where
it runs and, for the CPU, why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kiln.families import NpuFamily
from kiln.graph import Graph, Op, Value
from kiln.partition.support import reason
from kiln.spec import Exclusions


@dataclass
class Partition:
    """A connected set of quantized ops the NPU runs as one delegate."""

    index: int
    ops: list[Op]
    inputs: list[Value]  # produced outside, in the order the delegate takes them
    outputs: list[Value]  # used outside or program outputs, in the order it returns them


@dataclass
class Placement:
    op: Op
    partition: int | None  # index into Partitioning.partitions; None: the CPU
    reason: str | None  # why it is on the CPU


@dataclass
class Partitioning:
    graph: Graph
    partitions: list[Partition]
    placements: list[Placement]  # one per op, in graph order
    schedule: list[Op | Partition]  # CPU ops and partitions in an order that respects every dependency


def excluded(op: Op, exclusions: Exclusions) -> str | None:
    """Why `op` is excluded, if it is; an op decomposed from another (e.g. softmax's exp)
    is excluded with it."""
    origin_name, origin_type = op.origin
    for name in (op.name, origin_name):
        if name and name in exclusions.node_names:
            return f"excluded by node name {name!r}"
    for op_type in exclusions.op_types:
        for candidate in (op.op_type, origin_type):
            if candidate and candidate in (op_type, f"aten.{op_type}"):
                return f"excluded by op type {op_type!r}"
        if str(op.target) == op_type:
            return f"excluded by op type {op_type!r}"
    for module in exclusions.modules:
        if op.module == module or op.module.startswith(module + "."):
            return f"excluded by module {module!r}"
    return None


class _Sets:
    """Union-find over partition ids."""

    def __init__(self):
        self.parent: list[int] = []

    def new(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> int:
        a, b = self.find(a), self.find(b)
        self.parent[b] = a
        return a


NO_NPU = "the target is a CPU alone (no NPU): every op runs on the CPU"


def partition(
    graph: Graph,
    family: NpuFamily | None,
    exclusions: Exclusions = Exclusions(),
    delegate: bool = True,
    refused: Mapping[str, str] | None = None,
) -> Partitioning:
    """`refused` maps op names to why Vela could not place them (the compile driver learns it by
    compiling; kiln.compile): those ops stay on the CPU with that reason, as a rule's would.
    `family` None: a target without an NPU, every op on the CPU (NO_NPU)."""
    refused = refused or {}
    sets = _Sets()
    part: dict[int, int] = {}  # op id -> partition id (raw)
    reasons: dict[int, str | None] = {}
    depends: dict[int, set[int]] = {}  # op id -> partitions it depends on (raw ids)
    indirect: dict[int, set[int]] = {}  # ... through an op outside its own partition
    part_indirect: dict[int, set[int]] = {}  # canonical partition -> union of its ops' indirect

    for op in graph.ops:
        why = NO_NPU if family is None else reason(op, family) or excluded(op, exclusions) or refused.get(op.name)
        if why is None and not delegate:
            why = "delegation is off (--no-delegate, or --no-quantize: a float program runs on the CPU)"
        reasons[id(op)] = why
        producers = [v.producer for v in op.inputs if v.producer is not None]
        deps: set[int] = set()
        for p in producers:
            deps |= depends[id(p)]
            if id(p) in part:
                deps.add(part[id(p)])
        depends[id(op)] = deps
        if why is not None:
            indirect[id(op)] = set()
            continue
        # Partitions this op reaches only through something outside them must stay apart;
        # through a producer's partition, that is whatever any op of that partition so reaches.
        far = {sets.find(x) for p in producers if id(p) not in part for x in depends[id(p)]}
        for p in producers:
            if id(p) in part:
                far |= {sets.find(x) for x in part_indirect[sets.find(part[id(p)])]}
        chosen: int | None = None
        for p in producers:
            if id(p) not in part:
                continue
            candidate = sets.find(part[id(p)])
            if candidate in far or (chosen is not None and candidate == chosen):
                continue
            if chosen is None:
                chosen = candidate
            elif not _reaches(candidate, chosen, graph, part, sets, indirect):
                merged = part_indirect.pop(chosen) | part_indirect.pop(candidate)
                chosen = sets.union(chosen, candidate)
                part_indirect[chosen] = merged
        if chosen is None:
            chosen = sets.new()
            part_indirect[chosen] = set()
        part[id(op)] = chosen
        # Indirect dependencies: through producers outside this partition.
        ind: set[int] = set()
        for p in producers:
            if id(p) in part and sets.find(part[id(p)]) == sets.find(chosen):
                ind |= indirect[id(p)]
            else:
                ind |= depends[id(p)] | ({part[id(p)]} if id(p) in part else set())
        indirect[id(op)] = ind
        part_indirect[sets.find(chosen)] |= ind

    return _assemble(graph, part, reasons, sets)


def _reaches(a: int, b: int, graph: Graph, part, sets: _Sets, indirect) -> bool:
    """Whether partitions a and b depend on each other through something outside them."""
    for op in graph.ops:
        if id(op) in part:
            mine = sets.find(part[id(op)])
            others = {sets.find(x) for x in indirect[id(op)]}
            if (mine == a and b in others) or (mine == b and a in others):
                return True
    return False


def boundary(ops: list[Op], graph: Graph) -> tuple[list[Value], list[Value]]:
    """What a partition of `ops` (in graph order) exchanges with the rest of `graph`: its
    inputs, the runtime values its ops read from outside it, in order of first read; and its
    outputs, the values its ops produce that an op outside it reads or the program returns,
    in order of production. The one definition of a delegate's inputs and outputs: the
    partitioner builds partitions with it and kiln.checks holds them to it."""
    inside = {id(op) for op in ops}
    program_outputs = {id(v) for v in graph.outputs}
    inputs: dict[int, Value] = {}
    outputs: list[Value] = []
    for op in ops:
        for v in op.inputs:
            if not v.is_constant and (v.producer is None or id(v.producer) not in inside):
                inputs.setdefault(id(v), v)
        for v in op.outputs:
            if id(v) in program_outputs or any(id(u) not in inside for u in v.users):
                outputs.append(v)
    return list(inputs.values()), outputs


def _assemble(graph: Graph, part, reasons, sets: _Sets) -> Partitioning:
    order: list[int] = []  # canonical partition ids in order of first op
    members: dict[int, list[Op]] = {}
    for op in graph.ops:
        if id(op) in part:
            key = sets.find(part[id(op)])
            if key not in members:
                members[key] = []
                order.append(key)
            members[key].append(op)
    partitions = []
    index_of: dict[int, int] = {}
    for key in order:
        ops = members[key]
        inputs, outputs = boundary(ops, graph)
        index_of[key] = len(partitions)
        partitions.append(Partition(len(partitions), ops, inputs, outputs))
    placements = [
        Placement(op, index_of[sets.find(part[id(op)])] if id(op) in part else None, reasons[id(op)])
        for op in graph.ops
    ]
    return Partitioning(graph, partitions, placements, _schedule(graph, placements, partitions))


def _schedule(graph: Graph, placements: list[Placement], partitions: list[Partition]) -> list[Op | Partition]:
    """CPU ops and partitions, each after everything it reads (Kahn's algorithm, graph order as
    tie-break). The partitioner never builds a cycle; should it, no order exists, and the units
    left are appended in graph order: kiln.checks.partitions_acyclic, which the compile driver
    runs after this stage, is the one place a cycle is found and reported."""
    unit_of = {id(p.op): (partitions[p.partition] if p.partition is not None else p.op) for p in placements}
    units: list[Op | Partition] = []
    for p in placements:
        unit = unit_of[id(p.op)]
        if not any(u is unit for u in units):
            units.append(unit)
    needs: dict[int, set[int]] = {}
    for unit in units:
        ops = unit.ops if isinstance(unit, Partition) else [unit]
        needs[id(unit)] = {
            id(unit_of[id(v.producer)])
            for op in ops
            for v in op.inputs
            if v.producer is not None and unit_of[id(v.producer)] is not unit
        }
    done: set[int] = set()
    schedule: list[Op | Partition] = []
    while len(schedule) < len(units):
        waiting = [unit for unit in units if id(unit) not in done]
        ready = next((unit for unit in waiting if needs[id(unit)] <= done), None)
        for unit in [ready] if ready is not None else waiting:  # none ready: a cycle, see above
            schedule.append(unit)
            done.add(id(unit))
    return schedule
