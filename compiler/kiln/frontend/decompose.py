"""Rewrites of the exported graph before quantization, so each op the NPU lacks becomes
ops it has, each with its own observed range (the quantizer's transform_for_annotation).

For float programs (no quantization), fold_batch_norm folds inference batch norms into
the convolutions before them, as PT2E's prepare does for quantized ones.

Passes for quantization, in order:
- softmax_to_elementwise: softmax(x) = exp(x - max(x)) * reciprocal(sum(exp(x - max(x))))
  and log_softmax(x) = (x - max(x)) - log(sum(exp(x - max(x)))) along the op's dim; the
  max keeps every exp input at or below 0, so exp's int8 range is [0, 1].

The PT2E reference is the quantized rewritten graph, so the NPU matches it step for step.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten

SOFTMAX = {aten.softmax.int, aten._softmax.default}
LOG_SOFTMAX = {aten.log_softmax.int, aten._log_softmax.default}


def _call(graph, target, args: tuple, like: Node) -> Node:
    """A new node computing target(*args), with its fake value, placed before `like`;
    meta["kiln_origin"] = (like's name, like's op type), which exclusions and the report use."""
    with graph.inserting_before(like):
        node = graph.call_function(target, args)
    values = [a.meta["val"] if isinstance(a, Node) else a for a in args]
    node.meta["val"] = target(*values)
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in like.meta:
            node.meta[key] = like.meta[key]
    packet = like.target.overloadpacket._qualified_op_name.replace("::", ".")
    node.meta["kiln_origin"] = like.meta.get("kiln_origin", (like.name, packet))
    return node


def softmax_to_elementwise(gm: GraphModule) -> int:
    """Replaces softmax and log_softmax nodes; returns how many were replaced."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in SOFTMAX | LOG_SOFTMAX:
            continue
        x, dim = node.args[0], node.args[1]
        peak = _call(graph, aten.amax.default, (x, [dim], True), node)
        shifted = _call(graph, aten.sub.Tensor, (x, peak), node)
        exps = _call(graph, aten.exp.default, (shifted,), node)
        total = _call(graph, aten.sum.dim_IntList, (exps, [dim], True), node)
        if node.target in SOFTMAX:
            result = _call(graph, aten.mul.Tensor, (exps, _call(graph, aten.reciprocal.default, (total,), node)), node)
        else:
            result = _call(graph, aten.sub.Tensor, (shifted, _call(graph, aten.log.default, (total,), node)), node)
        _replace(node, result)
        count += 1
    return _finish(gm, count)


def fold_batch_norm(gm: GraphModule) -> int:
    """Folds each inference batch_norm whose input is a conv2d used only by it into that
    conv's weight and bias (new attributes; the originals stay); returns the count."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.batch_norm.default or node.args[5]:
            continue
        conv = node.args[0]
        if conv.op != "call_function" or conv.target is not aten.conv2d.default or len(conv.users) != 1:
            continue
        gamma, beta, mean, var = (_attribute(gm, a) for a in node.args[1:5])
        weight, bias = _attribute(gm, conv.args[1]), _attribute(gm, conv.args[2] if len(conv.args) > 2 else None)
        if weight is None or mean is None or var is None:
            continue
        factor = torch.rsqrt(var + node.args[7]) * (gamma if gamma is not None else 1)
        new_weight = weight * factor.reshape(-1, 1, 1, 1)
        new_bias = ((bias if bias is not None else torch.zeros_like(mean)) - mean) * factor
        new_bias = new_bias + (beta if beta is not None else 0)
        args = list(conv.args) + [None] * (3 - len(conv.args))
        for index, tensor in ((1, new_weight), (2, new_bias)):
            name = f"kiln_folded_{conv.name}_{'weight' if index == 1 else 'bias'}"
            gm.register_buffer(name, tensor.detach().clone())
            with graph.inserting_before(conv):
                attr = graph.get_attr(name)
            attr.meta["val"] = args[index].meta["val"] if isinstance(args[index], Node) else node.args[3].meta["val"]
            args[index] = attr
        conv.args = tuple(args)
        _replace(node, conv)
        count += 1
    return _finish(gm, count)


def _replace(node: Node, by: Node) -> None:
    node.replace_all_uses_with(by)
    node.graph.erase_node(node)


def _finish(gm: GraphModule, count: int) -> int:
    """After a pass that changed `count` nodes: drop what became unused, check, regenerate."""
    if count:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return count


def _attribute(gm: GraphModule, node) -> torch.Tensor | None:
    """The tensor a get_attr node names, else None."""
    if not isinstance(node, Node) or node.op != "get_attr":
        return None
    value = gm
    for part in node.target.split("."):
        value = getattr(value, part)
    return value.detach()


PASSES = (softmax_to_elementwise,)


def for_quantization(gm: GraphModule) -> GraphModule:
    for rewrite in PASSES:
        rewrite(gm)
    return gm
