"""Which ops of an otherwise 8-bit model compute with 16-bit activations (CompileSpec.int16).

`sixteen_bit` reads the normalised graph (kiln.frontend.normalize) and returns each chosen node
with the reason that chose it: a module pattern, or a policy of kiln.spec.INT16_POLICIES:
- "attention": every softmax and log_softmax, every matrix product of two activations (scores
  and their weighted sum), and the ops on a path from such a product to a softmax (the scale,
  the mask);
- "norms": the ops decomposed from layer_norm, rms_norm, group_norm and instance_norm, and the
  ops inside a module whose class name ends in "Norm" (a hand-written RMSNorm), but not a
  BatchNorm (folded into its convolution).
kiln's quantizer observes a chosen op's inputs and output at 16 bits; where an 8-bit value meets
a 16-bit reader (or the reverse), PT2E's graph holds a dequantize and a quantize, which
kiln.graph folds into one requantization (a RESCALE on the NPU).
"""

from __future__ import annotations

from torch.fx import GraphModule, Node

from kiln.frontend.rewrite import module_path
from kiln.spec import Int16Regions, in_module
from kiln.vocabulary import LOG_SOFTMAX_OPS, MATMUL_OPS, SOFTMAX_OPS

NORM_ORIGINS = ("aten.layer_norm", "aten.rms_norm", "aten.group_norm", "aten.instance_norm")


def _activation(arg) -> bool:
    return isinstance(arg, Node) and arg.op != "get_attr" and _is_float(arg)


def _is_float(node: Node) -> bool:
    value = node.meta.get("val")
    return getattr(value, "is_floating_point", lambda: False)()


def attention(nodes: list[Node]) -> set[Node]:
    """Softmaxes, products of two activations, and the ops between: from each softmax back through
    the ops that read a product's result (its scale, its mask), as far as the products."""
    products = {n for n in nodes if n.target in MATMUL_OPS and all(_activation(a) for a in n.args[:2])}
    after = set()  # the ops a product's result reaches
    stack = list(products)
    while stack:
        node = stack.pop()
        if node not in after:
            after.add(node)
            stack.extend(node.users)
    chosen = set(products)
    stack = [n for n in nodes if n.target in SOFTMAX_OPS or n.target in LOG_SOFTMAX_OPS]
    while stack:
        node = stack.pop()
        if node in chosen:
            continue
        chosen.add(node)
        stack.extend(a for a in node.all_input_nodes if a in after)
    return chosen


def _module_class(node: Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    kind = list(stack.values())[-1][1]
    return getattr(kind, "__name__", str(kind)).rpartition(".")[2]


def norms(nodes: list[Node]) -> set[Node]:
    """The steps of the norms kiln decomposes, and the ops inside a *Norm module (not BatchNorm)."""
    chosen = set()
    for n in nodes:
        origin = n.meta.get("kiln_origin", ("", ""))[1]
        kind = _module_class(n)
        if origin in NORM_ORIGINS or (kind.endswith("Norm") and "BatchNorm" not in kind):
            chosen.add(n)
    return chosen


POLICIES = {"attention": attention, "norms": norms}


def sixteen_bit(gm: GraphModule, regions: Int16Regions) -> dict[Node, str]:
    """node -> why it computes at 16 bits: "module pattern '<pattern>'" or "policy '<name>'"
    (a pattern first, then the policies in the order given)."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    chosen: dict[Node, str] = {}
    for pattern in regions.modules:
        for n in nodes:
            if n not in chosen and in_module(module_path(n), pattern):
                chosen[n] = f"module pattern {pattern!r}"
    for policy in regions.policies:
        members = POLICIES[policy](nodes)
        for n in nodes:
            if n not in chosen and n in members:
                chosen[n] = f"policy {policy!r}"
    return chosen
