"""`--int16 auto`: which ops of an 8-bit model compute at 16 bits, chosen by measurement.

The unit of choice is a quantized value: a tensor the 8-bit model rounds to int8 on its way from
the op that writes it to the ops that read it. Values that share one set of qparams (a reshape,
a cat, a requantization between two ranges of the same tensor) form one candidate, as rounding
one of them and not the others loses the same steps. A candidate at 16 bits is its writers and
its readers at 16 bits: an op reads its inputs and writes its output in its own width, so an
8-bit writer or reader on either side would round the value to 8 bits again.

The measure (Measure, on the calibration samples, against the float model): the PT2E reference
of the 8-bit quantization (kiln.frontend.quantizer, so every range is kiln's own; its constants
left unfolded, so that an op's constant operand is rounded in the op's width) with a switch on
each quantized value that passes it on unrounded (instrument()). A candidate's figure is the
output SQNR (signal to quantization noise, dB, the worst of the model's float outputs) the model
gains when that candidate is left unrounded: the error its 8 bits cost. 16 bits are taken as
exact here (256 times the levels); the report's `pt2e_sqnr_db` measures the mixed quantization
chosen.

The rule (choose()): where the 8-bit model's output SQNR is below the target, candidates are
promoted in order of their figure (largest first, graph order between equals), each with a
figure of at least MIN_GAIN_DB, until the model with every promoted candidate unrounded reaches
the target or the budget of 16-bit ops is spent; up to ROUNDS rounds each measure the candidates
left on top of those promoted. A candidate refusal() refuses is not promoted: one with an op the
target's NPU runs at 8 bits and would not at 16, or one that reads or writes a program's state.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Node

from kiln.vocabulary import DEQUANTIZE, DEQUANTIZE_CHANNEL, QUANTIZE

# The least gain in output SQNR that makes a candidate worth 16 bits: below it the measure cannot
# tell the candidate's error from the rounding elsewhere.
MIN_GAIN_DB = 0.1
# The most rounds of measuring every candidate left (choose()).
ROUNDS = 3
# The most calibration samples the measure runs (evenly spaced over them): each candidate costs a
# run of the reference over every sample.
MEASURED_SAMPLES = 16
_SWITCHES = "_kiln_unrounded"  # the measured module's buffer: one bool per quantized value


@dataclass
class Candidate:
    """A quantized value (one or more quantize nodes sharing its qparams): `name` the op that
    first writes it, `ops` the ops that would compute at 16 bits, `gain_db` its figure."""

    name: str
    switches: list[int]
    ops: list[str]
    inputs: list[str] = field(default_factory=list)  # the graph inputs (placeholder names) it rounds
    gain_db: float = 0.0
    round: int = 0  # the round of choose() that measured gain_db (0: none did)
    refused: str = ""  # why it may not be promoted ("" where it may)


@dataclass
class Choice:
    """What choose() decided and the figures that decided it (the report's int16_auto)."""

    target_db: float
    budget: int | None
    int8_db: float
    chosen_db: float
    pt2e_db: float | None = None  # the output SQNR of the PT2E reference of the mixed quantization chosen
    promoted: list[Candidate] = field(default_factory=list)
    measured: list[Candidate] = field(default_factory=list)  # the promoted, then the others by figure

    def reasons(self) -> dict[str, str]:
        """op name -> why it is 16-bit (the figure of the value that made it so)."""
        why: dict[str, str] = {}
        for c in self.promoted:
            for op in c.ops:
                why.setdefault(op, f"auto: {c.name}'s value at 8 bits costs {c.gain_db:.1f} dB of output SQNR")
        return why

    def as_report(self, placed: list[dict]) -> dict:
        """The report's int16_auto; `placed` is the report's ops: the promoted ones the partitioner
        kept on the CPU after all are listed with why (refusal() judged them with every activation
        at 16 bits)."""

        def entry(c: Candidate) -> dict:
            refused = {"refused": c.refused} if c.refused else {}
            return {"value": c.name, "gain_db": round(c.gain_db, 3), "round": c.round, "ops": c.ops, **refused}

        promoted = {op for c in self.promoted for op in c.ops}
        return {
            "rule": {"target_sqnr_db": self.target_db, "budget_ops": self.budget, "min_gain_db": MIN_GAIN_DB},
            "int8_sqnr_db": round(self.int8_db, 3),
            "chosen_sqnr_db": round(self.chosen_db, 3),
            "pt2e_sqnr_db": None if self.pt2e_db is None else round(self.pt2e_db, 3),
            "promoted": [entry(c) for c in self.promoted],
            "measured": [entry(c) for c in self.measured],
            "cpu_ops": {o["node"]: o["reason"] for o in placed if o["node"] in promoted and o["where"] == "cpu"},
        }


def _is_quantize(node: Node) -> bool:
    return node.op == "call_function" and node.target in QUANTIZE


def _is_dequantize(node: Node) -> bool:
    return node.op == "call_function" and node.target in DEQUANTIZE


def _is_constant(node: Node) -> bool:
    """A dequantized weight, or a float constant."""
    return node.op == "get_attr" or (node.op == "call_function" and node.target in DEQUANTIZE_CHANNEL)


def _dtype(q: Node):
    return q.args[5] if len(q.args) > 5 else q.kwargs.get("dtype")


def _qparams(q: Node) -> tuple:
    return tuple(q.args[1:6])


class _Groups:
    """Union-find over quantize nodes."""

    def __init__(self, nodes: Sequence[Node]):
        self.parent = {n: n for n in nodes}

    def find(self, n: Node) -> Node:
        while self.parent[n] is not n:
            self.parent[n] = self.parent[self.parent[n]]
            n = self.parent[n]
        return n

    def union(self, a: Node, b: Node) -> None:
        self.parent[self.find(a)] = self.find(b)


def _writers(q: Node) -> list[Node]:
    """The ops that compute the value `q` rounds: its input, and the ops before it up to the
    nearest dequantize (a MAC and the activation fused after it)."""
    found, stack = [], [q.args[0]]
    while stack:
        n = stack.pop()
        if not isinstance(n, Node) or n.op != "call_function" or _is_dequantize(n) or _is_constant(n) or n in found:
            continue
        found.append(n)
        stack.extend(n.all_input_nodes)
    return found


def _rounds_constant(q: Node) -> bool:
    return isinstance(q.args[0], Node) and q.args[0].op == "get_attr"


def _grouped(gm: GraphModule) -> list[list[Node]]:
    """The 8-bit quantize nodes of a converted module, grouped into values: a quantize of a
    dequantized value (a requantization) joins the value's group, and so does one whose op reads
    only dequantized values and rounds to the same qparams as one of them (a shared range). A
    constant's quantize is no value: its reader's width decides its own."""
    quantizes = [n for n in gm.graph.nodes if _is_quantize(n) and _dtype(n) == torch.int8 and not _rounds_constant(n)]
    groups = _Groups(quantizes)
    for q in quantizes:
        source = q.args[0]
        if not isinstance(source, Node):
            continue
        if _is_dequantize(source) and source.args[0] in groups.parent:
            groups.union(q, source.args[0])
            continue
        inputs = source.all_input_nodes if source.op == "call_function" else []
        for d in inputs:
            if _is_dequantize(d) and d.args[0] in groups.parent and _qparams(d.args[0]) == _qparams(q):
                groups.union(q, d.args[0])
    members: dict[Node, list[Node]] = {}
    for q in quantizes:
        members.setdefault(groups.find(q), []).append(q)
    return list(members.values())


def _ops_of(group: list[Node]) -> list[str]:
    """The ops that compute a group's value and read it, by name, in graph order."""
    ops: set[Node] = set()
    for q in group:
        ops.update(_writers(q))
        for d in q.users:
            ops.update(r for r in d.users if r.op == "call_function" and not _is_quantize(r))
    ops = {n for n in ops if not _is_quantize(n) and not _is_dequantize(n)}
    order = {n: i for i, n in enumerate(group[0].graph.nodes)}
    return [n.name for n in sorted(ops, key=order.__getitem__)]


def _constants_read(gm: GraphModule) -> dict[Node, set[str]]:
    """The 8-bit quantize of each constant (left unfolded) -> the ops reading it, by name."""
    return {
        q: {r.name for d in q.users for r in d.users}
        for q in gm.graph.nodes
        if _is_quantize(q) and _dtype(q) == torch.int8 and _rounds_constant(q)
    }


def instrument(gm: GraphModule) -> list[Candidate]:
    """Puts a switch after every 8-bit quantize-dequantize pair of the converted module `gm` (in
    place; its constants' quantizes not folded): where the module's bool buffer _SWITCHES holds
    True at the pair's index, its readers get the unrounded value. Returns the candidates (one per
    group of pairs, with the pairs of the constants their ops read), in graph order."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    groups = sorted(_grouped(gm), key=lambda g: min(order[q] for q in g))
    constants = _constants_read(gm)
    candidates = []
    for group in groups:
        first = min(group, key=order.__getitem__).args[0]
        name = first.name if isinstance(first, Node) else str(first)
        inputs = [q.args[0].name for q in group if isinstance(q.args[0], Node) and q.args[0].op == "placeholder"]
        candidates.append(Candidate(name, [], _ops_of(group), inputs))
    index = {q: i for i, q in enumerate([*(q for g in groups for q in g), *constants])}
    for group, candidate in zip(groups, candidates):
        read = [c for c, readers in constants.items() if readers & set(candidate.ops)]
        candidate.switches = sorted(index[q] for q in [*group, *read])
    gm.register_buffer(_SWITCHES, torch.zeros(len(index), dtype=torch.bool))
    for q, i in index.items():
        for d in [u for u in q.users if _is_dequantize(u)]:
            with gm.graph.inserting_after(d):
                switches = gm.graph.get_attr(_SWITCHES)
            with gm.graph.inserting_after(switches):
                flag = gm.graph.call_function(operator.getitem, (switches, i))
            with gm.graph.inserting_after(flag):
                picked = gm.graph.call_function(torch.where, (flag, q.args[0], d))
            d.replace_all_uses_with(picked, delete_user_cb=lambda user, picked=picked: user is not picked)
    gm.recompile()
    return candidates


def sqnr_db(want: torch.Tensor, got: torch.Tensor) -> float:
    """10 log10(signal power / error power), +inf where there is no error."""
    noise = float(torch.sum((got.double() - want.double()) ** 2))
    signal = float(torch.sum(want.double() ** 2))
    return math.inf if noise == 0 else 10 * math.log10(max(signal, 1e-30) / noise)


def _float_outputs(outputs, count: int) -> list[torch.Tensor]:
    flat = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    return [t for t in flat[:count] if isinstance(t, torch.Tensor) and t.is_floating_point()]


class Measure:
    """The output SQNR of a module against the float module's outputs over the samples (the
    first `outputs` outputs: a method's own, not its state): the worst output's."""

    def __init__(self, float_module: GraphModule, samples: Sequence[tuple], outputs: int):
        step = max(1, math.ceil(len(samples) / MEASURED_SAMPLES))
        self.samples, self.outputs = list(samples)[::step], outputs
        with torch.no_grad():  # forward: not the exported module's check of its pytree inputs (a state is lifted)
            self.want = [_float_outputs(float_module.forward(*s), outputs) for s in self.samples]

    def sqnr(self, module: torch.nn.Module) -> float:
        with torch.no_grad():
            got = [_float_outputs(module(*s), self.outputs) for s in self.samples]
        return min(
            sqnr_db(torch.cat([w[k].flatten() for w in self.want]), torch.cat([g[k].flatten() for g in got]))
            for k in range(len(self.want[0]))
        )

    def switched(self, gm: GraphModule, switches: Sequence[int]) -> float:
        """The SQNR of `gm` (instrument()'s) with `switches` on."""
        flags = getattr(gm, _SWITCHES)
        flags.zero_()
        flags[list(switches)] = True
        return self.sqnr(gm)


def choose(
    candidates: list[Candidate],
    measure: Callable[[Sequence[int]], float],
    target_db: float,
    budget: int | None,
    refuse: Callable[[Candidate], str] = lambda c: "",
) -> Choice:
    """The candidates to promote under the rule of the module docstring, in ROUNDS: each round
    measures every candidate left on top of the ones promoted before (two values may each matter
    only once the other is exact) and promotes in order of that figure; `refuse` says why a
    candidate may not be promoted ("" where it may)."""
    base = measure(())
    choice = Choice(target_db, budget, base, base)
    if base >= target_db:
        return choice
    for c in candidates:
        c.refused = refuse(c)
    on, ops, left = [], set(), list(candidates)
    for n in range(1, ROUNDS + 1):
        if choice.chosen_db >= target_db:
            break
        for c in left:
            c.gain_db, c.round = measure(on + c.switches) - choice.chosen_db, n
        left.sort(key=lambda c: -c.gain_db)  # a stable sort: graph order between equal figures
        promoted = len(choice.promoted)
        for c in list(left):
            if choice.chosen_db >= target_db or c.gain_db < MIN_GAIN_DB:
                break
            if c.refused or (budget is not None and len(ops | set(c.ops)) > budget):
                continue
            on += c.switches
            ops |= set(c.ops)
            left.remove(c)
            choice.promoted.append(c)
            choice.chosen_db = measure(on)
        if len(choice.promoted) == promoted:
            break
    choice.measured = choice.promoted + [c for c in left if c.round]
    return choice


def refusal(
    candidates: list[Candidate],
    npu8: set[str],
    npu16: Callable[[], set[str]],
    state_inputs: dict[str, str],
    target: str,
) -> Callable[[Candidate], str]:
    """Why choose() may not promote a candidate ("" where it may): one of its ops reads or writes
    a program's state (`state_inputs`: input name -> buffer name; a state keeps one width in every
    method, and auto keeps it at 8 bits: the ops of the candidates that round it), or runs on the
    target's NPU at 8 bits (`npu8`) and not with every activation at 16 bits (`npu16()`)."""
    state_ops = {op: state_inputs[i] for c in candidates for i in c.inputs if i in state_inputs for op in c.ops}

    def refuse(candidate: Candidate) -> str:
        held = [op for op in candidate.ops if op in state_ops]
        if held:
            state = state_ops[held[0]]
            return f"{held[0]} reads or writes the program's state {state}, which keeps 8 bits in every method"
        lost = [op for op in candidate.ops if op in npu8 and op not in npu16()]
        return f"{', '.join(lost)} would run on the CPU at 16 bits on {target}" if lost else ""

    return refuse


def format_report(auto: dict) -> list[str]:
    """The report's int16_auto as `kiln compile` prints it: one line, then each promoted value."""
    rule = auto["rule"]
    budget = f", at most {rule['budget_ops']} ops" if rule["budget_ops"] is not None else ""
    ops = {op for c in auto["promoted"] for op in c["ops"]}
    lines = [
        f"  16-bit by measurement (target {rule['target_sqnr_db']:g} dB{budget}): {len(ops)} ops for "
        f"{len(auto['promoted'])} value(s); output SQNR against float {auto['int8_sqnr_db']:.1f} dB at 8 bits, "
        f"{auto['chosen_sqnr_db']:.1f} dB measured with them exact, {auto['pt2e_sqnr_db']:.1f} dB as compiled"
    ]
    lines += [f"    {c['value']}: +{c['gain_db']:.1f} dB ({len(c['ops'])} ops)" for c in auto["promoted"]]
    lines += [f"    on the CPU after all: {node}: {why}" for node, why in auto["cpu_ops"].items()]
    return lines
