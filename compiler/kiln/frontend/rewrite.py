"""What every graph rewrite of the front end shares: emitting ops in place of one node.

A rewrite replaces a node of the exported graph (the anchor) by new nodes placed before it.
Each new node carries its fake value (meta["val"], computed by running the op on the
inputs' fake values), the anchor's source location and module path, and the anchor as its
origin (meta["kiln_origin"] = (node name, op type)), which --exclude-op and the report use to
name the op the user wrote. A node made from an already rewritten node keeps the first origin.
"""

from __future__ import annotations

import functools

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

LOCATION_KEYS = ("stack_trace", "nn_module_stack", "source_fn_stack")


def op_type(node: Node) -> str:
    """e.g. "aten.conv1d": the node's op without its overload."""
    return target_name(node.target)


def target_name(target) -> str:
    """e.g. "aten.conv1d" for an aten overload, "higher_order.cond" for a higher-order operator."""
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    return target.overloadpacket._qualified_op_name.replace("::", ".")


def module_path(node: Node) -> str:
    """The path of the innermost module that made `node` ("blocks.0.attn"; "" at top level)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path.removeprefix("L['self'].").removeprefix("L__self__.")


def origin(node: Node) -> tuple[str, str]:
    return node.meta.get("kiln_origin", (node.name, op_type(node)))


def bound(node: Node) -> dict:
    """The node's arguments by their schema names, defaults filled in."""
    schema = node.target._schema
    values = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            values[a.name] = node.args[i]
        elif a.name in node.kwargs:
            values[a.name] = node.kwargs[a.name]
        else:
            values[a.name] = a.default_value if a.has_default_value() else None
    return values


def value(node) -> object:
    """The fake value of a node, or the argument itself if it is not a node."""
    return node.meta["val"] if isinstance(node, Node) else node


class Emitter:
    """Emits nodes before `anchor` (see the module's docstring) in `gm`."""

    def __init__(self, gm: GraphModule, anchor: Node):
        self.gm, self.graph, self.anchor = gm, gm.graph, anchor
        self.origin = origin(anchor)

    def __call__(self, target, *args, **kwargs) -> Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(target, args, kwargs)
        node.meta["val"] = target(*map_arg(args, value), **map_arg(kwargs, value))
        self._describe(node)
        return node

    def constant(self, tensor: torch.Tensor, name: str) -> Node:
        """A get_attr node reading a new buffer `kiln_<anchor>_<name>` that holds `tensor`."""
        attribute = f"kiln_{self.anchor.name}_{name}"
        self.gm.register_buffer(attribute, tensor.detach().clone().contiguous())
        with self.graph.inserting_before(self.anchor):
            node = self.graph.get_attr(attribute)
        node.meta["val"] = _fake_mode(self.anchor).from_tensor(getattr(self.gm, attribute), static_shapes=True)
        self._describe(node)
        return node

    def _describe(self, node: Node) -> None:
        for key in LOCATION_KEYS:
            if key in self.anchor.meta:
                node.meta[key] = self.anchor.meta[key]
        node.meta["kiln_origin"] = self.origin


def _fake_mode(node: Node):
    """The fake tensor mode of the exported graph `node` belongs to."""
    for n in node.graph.nodes:
        fake = getattr(n.meta.get("val"), "fake_mode", None)
        if fake is not None:
            return fake
    raise AssertionError("an exported graph without fake values")


def attribute(gm: GraphModule, node) -> torch.Tensor | None:
    """The tensor a get_attr node names, else None."""
    if not isinstance(node, Node) or node.op != "get_attr":
        return None
    return functools.reduce(getattr, node.target.split("."), gm).detach()


def replace(node: Node, by: Node) -> None:
    """Every use of `node` reads `by`; `node` is erased."""
    node.replace_all_uses_with(by)
    node.graph.erase_node(node)


def finish(gm: GraphModule, count: int) -> int:
    """After a pass that changed `count` nodes: drop what became unused, check, regenerate."""
    if count:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return count
