"""Higher-order operators and nested graph modules of an exported graph, inlined or refused.

torch.export keeps some Python constructs as a call of a higher-order operator
(torch.ops.higher_order.*) on a graph module held as an attribute of the exported module (a
get_attr node): a `torch.no_grad()`/`@torch.no_grad` region (or `torch.enable_grad()` when
exported under no_grad) as wrap_with_set_grad_enabled, a `torch.autocast` region as
wrap_with_autocast, `torch.cond`, `torch._higher_order_ops.map`/`scan`/`while_loop`. kiln
compiles one inference of fixed shapes, so:

  wrap_with_set_grad_enabled  its graph inlined (gradients do not matter to an inference)
  wrap_with_autocast          its graph inlined: kiln computes in float32 or quantized integers,
                              whatever precision the region asked for
  cond                        a constant predicate (a bool, a buffer): the branch it takes
                              inlined; else both branches inlined and each output chosen by
                              aten.where on the predicate
  map_impl                    unrolled: the body once per slice of the mapped dim, outputs stacked
  scan                        unrolled: the body once per step, the carries chained, outputs stacked
  anything else               refused (REFUSED's advice, or a general one), as is a call_module
                              node or a graph module read by anything but these operators

The inlined nodes keep their own source locations; a get_attr inside a nested graph reads
the same attribute through the nested module's path.
"""

from __future__ import annotations

import functools
import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

from kiln.errors import ModelError
from kiln.frontend.rewrite import Emitter, finish, op_type, value

aten = torch.ops.aten
higher_order = torch.ops.higher_order

# op -> advice for a higher-order op kiln refuses by name
REFUSED = {
    higher_order.while_loop: "the number of iterations is decided at run time and kiln compiles a graph of fixed "
    "steps: write the loop as a Python for loop over a fixed count (export unrolls it)",
}


def _where(node: Node) -> str:
    return f"node {node.name} ({op_type(node)})"


def _graph_module(gm: GraphModule, node: Node, holder: Node) -> tuple[GraphModule, str]:
    """(the graph module a get_attr argument of `holder` names, its attribute path)."""
    if not isinstance(node, Node) or node.op != "get_attr":
        raise ModelError(f"{_where(holder)}: its graph argument is not a graph module of the model")
    module = functools.reduce(getattr, node.target.split("."), gm)
    if not isinstance(module, GraphModule):
        raise ModelError(f"{_where(holder)}: {node.target} is a {type(module).__name__}, not a graph module")
    return module, node.target


def inline_graph(gm: GraphModule, anchor: Node, graph_arg: Node, operands: list) -> list:
    """Copies the graph module `graph_arg` names into `gm` before `anchor`, its placeholders
    reading `operands` in order; returns what its output node returns, flattened."""
    sub, path = _graph_module(gm, graph_arg, anchor)
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(operands):
        raise ModelError(
            f"{_where(anchor)}: its graph takes {len(placeholders)} operands, the call passes {len(operands)}"
        )
    env = dict(zip(placeholders, operands))
    outputs = []
    with gm.graph.inserting_before(anchor):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outputs = map_arg(n.args[0], env.__getitem__)
                break
            copy = gm.graph.node_copy(n, env.__getitem__)
            if n.op == "get_attr":
                copy.target = f"{path}.{n.target}"
            env[n] = copy
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _wrapped(graph_at: int):
    """A region whose graph is argument `graph_at` and whose operands follow it."""

    def inline(gm: GraphModule, node: Node) -> list:
        return inline_graph(gm, node, node.args[graph_at], list(node.args[graph_at + 1 :]))

    return inline


def _constant_predicate(gm: GraphModule, predicate) -> bool | None:
    if isinstance(predicate, bool):
        return predicate
    if isinstance(predicate, Node) and predicate.op == "get_attr":
        return bool(functools.reduce(getattr, predicate.target.split("."), gm))
    return None


def _cond(gm: GraphModule, node: Node) -> list:
    predicate, true_graph, false_graph, operands = node.args[:4]
    taken = _constant_predicate(gm, predicate)
    if taken is not None:
        return inline_graph(gm, node, true_graph if taken else false_graph, list(operands))
    on_true = inline_graph(gm, node, true_graph, list(operands))
    on_false = inline_graph(gm, node, false_graph, list(operands))
    emit = Emitter(gm, node)
    return [emit(aten.where.self, predicate, t, f) for t, f in zip(on_true, on_false)]


def _steps(node: Node, xs: list) -> int:
    if not xs:
        raise ModelError(f"{_where(node)}: maps over no tensor")
    steps = value(xs[0]).shape[0]
    if not isinstance(steps, int) or steps < 1:
        raise ModelError(f"{_where(node)}: runs {steps} steps; kiln unrolls a fixed, nonzero number of steps")
    return steps


def _stacked(emit: Emitter, per_step: list[list]) -> list:
    """Output j of every step, stacked along a new dim 0."""
    return [emit(aten.stack.default, [step[j] for step in per_step], 0) for j in range(len(per_step[0]))]


def _map(gm: GraphModule, node: Node) -> list:
    body, xs, extra = node.args[:3]
    emit = Emitter(gm, node)
    per_step = [
        inline_graph(gm, node, body, [*(emit(aten.select.int, x, 0, i) for x in xs), *extra])
        for i in range(_steps(node, xs))
    ]
    return _stacked(emit, per_step)


def _scan(gm: GraphModule, node: Node) -> list:
    body, carries, xs, extra = node.args[:4]
    emit = Emitter(gm, node)
    carries, per_step = list(carries), []
    for i in range(_steps(node, xs)):
        out = inline_graph(gm, node, body, [*carries, *(emit(aten.select.int, x, 0, i) for x in xs), *extra])
        carries, ys = out[: len(carries)], out[len(carries) :]
        per_step.append(ys)
    return carries + (_stacked(emit, per_step) if per_step[0] else [])


INLINED = {  # op -> (inlining, what it becomes: OPS.md's text)
    higher_order.wrap_with_set_grad_enabled: (  # (enabled, graph, *operands)
        _wrapped(1),
        "its graph inlined (`torch.no_grad()` and `torch.enable_grad()` regions; gradients do not matter)",
    ),
    higher_order.wrap_with_autocast: (  # (device, dtype, enabled, cache_enabled, graph, *operands)
        _wrapped(4),
        "its graph inlined (`torch.autocast` regions; kiln computes in float32 or quantized integers)",
    ),
    higher_order.cond: (  # (predicate, true graph, false graph, operands)
        _cond,
        "the branch a constant predicate takes, inlined; else both branches inlined and each output "
        "chosen by `where` on the predicate",
    ),
    higher_order.map_impl: (  # (graph, mapped operands, other operands)
        _map,
        "unrolled: the body once per slice of dim 0, its outputs stacked",
    ),
    higher_order.scan: (  # (graph, initial carries, scanned operands, other operands)
        _scan,
        "unrolled: the body once per slice of dim 0, the carries chained, its other outputs stacked",
    ),
}


def _refuse_module_use(gm: GraphModule, node: Node) -> None:
    """A call_module node, or a graph module read by an op other than INLINED's: a ModelError."""
    if node.op == "call_module" and node.target != "_guards_fn":
        raise ModelError(
            f"node {node.name} calls submodule {node.target} of the exported graph; kiln compiles one flat graph "
            "of aten ops: export the model without it"
        )
    if node.op == "get_attr" and isinstance(functools.reduce(getattr, node.target.split("."), gm), torch.nn.Module):
        for user in node.users:
            if not isinstance(user.target, torch._ops.HigherOrderOperator):
                raise ModelError(
                    f"node {user.name} reads the graph module {node.target} as a value; kiln compiles one flat graph "
                    "of aten ops"
                )


def inline_higher_order(gm: GraphModule) -> int:
    """Each higher-order op of INLINED becomes the ops of its graph(s) (nested ones too); any
    other is a ModelError naming node, op and what to do. Returns how many were inlined."""
    count = 0
    while True:
        found = [n for n in gm.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)]
        for node in found:
            if node.target not in INLINED:
                advice = REFUSED.get(
                    node.target, "kiln inlines only the operators OPS.md lists: write the model without it"
                )
                raise ModelError(f"{_where(node)} is a higher-order operator kiln does not compile: {advice}")
            outputs = INLINED[node.target][0](gm, node)
            for user in list(node.users):
                if user.op != "call_function" or user.target is not operator.getitem:
                    raise ModelError(f"{_where(node)}: its outputs are read other than one by one ({user.name})")
                user.replace_all_uses_with(outputs[user.args[1]])
                gm.graph.erase_node(user)
            gm.graph.erase_node(node)
        count += len(found)
        finish(gm, len(found))
        if not found:
            break
    for node in gm.graph.nodes:
        _refuse_module_use(gm, node)
    return count
