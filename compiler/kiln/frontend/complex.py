"""Complex tensors as real ones: rotary embeddings written as Meta's reference Llama writes them
(`torch.view_as_complex` of the query's pairs, times `freqs_cis` made by `torch.polar`, then
`torch.view_as_real`) compute with complex64 values, which neither TOSA nor the NPU has.

complex_as_real rewrites every complex value of shape S as the real tensor of shape S + [2] that
`torch.view_as_real` gives (the real part, then the imaginary one, in the last dim), the layout
view_as_complex reads, so both of those become no-ops:

    view_as_complex(x)        x
    view_as_real(c)           c's real form
    complex(re, im)           stack of re and im in a new last dim
    polar(abs, angle)         stack of abs * cos(angle) and abs * sin(angle)
    a complex constant        its view_as_real, a new constant
    a * b (both complex)      cat(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re) in the last dim
    a * r, a + b, a - b       on the real forms (a real r widened by a last dim of 1)
    view, reshape, ...        the same view with the last dim of 2 kept (COMPLEX_VIEWS)

Any other op of a complex value is a ModelError naming node and op. The pass runs after constant
folding, so `freqs_cis[:seq]` and its view are already one constant.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from kiln.errors import ModelError
from kiln.frontend.rewrite import Emitter, attribute, finish, replace, target_name, value

aten = torch.ops.aten

# Views of a complex tensor: the same op on its real form, with a last dim of 2 appended to each
# shape argument and negative dims counted one further from the end.
COMPLEX_VIEWS = {
    aten.view.default: "shape",
    aten.reshape.default: "shape",
    aten._unsafe_view.default: "shape",
    aten.expand.default: "shape",
    aten.slice.Tensor: "dim",
    aten.select.int: "dim",
    aten.unsqueeze.default: "dim",
    aten.squeeze.dim: "dim",
    aten.permute.default: "dims",
    aten.transpose.int: "dims",
    aten.clone.default: None,
    aten.alias.default: None,
    aten._to_copy.default: None,
}


def _is_complex(node) -> bool:
    return isinstance(node, Node) and isinstance(v := node.meta.get("val"), torch.Tensor) and v.is_complex()


def _complex_dim(dim: int, rank: int) -> int:
    """A dim of a complex tensor of `rank` dims (`rank` one more for unsqueeze's new dim) as the same
    dim of its real form, whose last dim is the parts."""
    return dim % rank


def _view(emit: Emitter, node: Node, real: Node) -> Node:
    kind = COMPLEX_VIEWS[node.target]
    rank = value(node.args[0]).dim()
    args = list(node.args)
    if kind == "shape":
        return emit(node.target, real, [*value(node).shape, 2])
    if kind == "dim":
        dim = args[1] if len(args) > 1 else 0
        rest = args[2:]
        return emit(node.target, real, _complex_dim(dim, rank + (node.target is aten.unsqueeze.default)), *rest)
    if kind == "dims" and node.target is aten.permute.default:
        return emit(node.target, real, [_complex_dim(d, rank) for d in args[1]] + [rank])
    if kind == "dims":
        return emit(node.target, real, _complex_dim(args[1], rank), _complex_dim(args[2], rank))
    if node.target is aten._to_copy.default:
        return emit(aten.clone.default, real)
    return emit(node.target, real)


def _part(emit: Emitter, real: Node, k: int) -> Node:
    """The real (k = 0) or imaginary (k = 1) part of a real form, keeping the last dim (of 1)."""
    return emit(aten.slice.Tensor, real, -1, k, k + 1)


def _product(emit: Emitter, a: Node, b: Node) -> Node:
    (ar, ai), (br, bi) = (_part(emit, a, 0), _part(emit, a, 1)), (_part(emit, b, 0), _part(emit, b, 1))
    re = emit(aten.sub.Tensor, emit(aten.mul.Tensor, ar, br), emit(aten.mul.Tensor, ai, bi))
    im = emit(aten.add.Tensor, emit(aten.mul.Tensor, ar, bi), emit(aten.mul.Tensor, ai, br))
    return emit(aten.cat.default, [re, im], -1)


def _real_operand(emit: Emitter, x) -> object:
    """A real tensor or number beside a complex one: a tensor gains a last dim of 1 (so it scales
    both parts); a number stays."""
    return emit(aten.unsqueeze.default, x, -1) if isinstance(x, Node) else x


def _rewrite(emit: Emitter, node: Node, real: dict[Node, Node]) -> Node | None:
    """The real form of `node`'s result (or, for view_as_real, its real result)."""
    target, args = node.target, node.args
    if target is aten.view_as_complex.default:
        return args[0]
    if target is aten.view_as_real.default:
        return real[args[0]]
    if target is aten.complex.default:  # torch.complex(re, im)
        return emit(aten.stack.default, [args[0], args[1]], -1)
    if target is aten.polar.default:  # torch.polar(abs, angle)
        magnitude, angle = args
        parts = [emit(aten.mul.Tensor, magnitude, emit(f, angle)) for f in (aten.cos.default, aten.sin.default)]
        return emit(aten.stack.default, parts, -1)
    if target in COMPLEX_VIEWS and args[0] in real:  # not a real tensor made complex (x.to(complex64))
        return _view(emit, node, real[args[0]])
    if target in (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor) and len(node.kwargs) == 0:
        a, b = args[0], args[1]
        if target is aten.mul.Tensor and _is_complex(a) and _is_complex(b):
            return _product(emit, real[a], real[b])
        if _is_complex(a) and _is_complex(b):
            return emit(target, real[a], real[b])
        if target is aten.mul.Tensor:
            x, other = (real[a], b) if _is_complex(a) else (real[b], a)
            return emit(target, x, _real_operand(emit, other))
    return None


def complex_as_real(gm: GraphModule) -> int:
    """Rewrites the graph's complex values as real ones (the module docstring); returns how many."""
    real: dict[Node, Node] = {}
    count = 0
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and _is_complex(node) and node.users:
            first = next(n for n in gm.graph.nodes if n in node.users)  # the new constant goes before it
            real[node] = Emitter(gm, first).constant(torch.view_as_real(attribute(gm, node)).contiguous(), "real")
            continue
        if node.op != "call_function":
            continue
        operands = [a for a in node.all_input_nodes if _is_complex(a)]
        if not operands and not _is_complex(node):
            continue
        if any(a not in real for a in operands):
            raise ModelError(
                f"node {node.name}: complex model inputs are not supported (pass the real and "
                "imaginary parts as a real tensor with a last dim of 2, torch.view_as_real)"
            )
        form = _rewrite(Emitter(gm, node), node, real)
        if form is None:
            raise ModelError(
                f"node {node.name} ({target_name(node.target)}) computes with complex tensors; kiln computes "
                "view_as_complex, view_as_real, views, products and sums of them (complex rotary embeddings): "
                "write the op with real tensors"
            )
        if _is_complex(node):
            real[node] = form
        else:  # view_as_real: its users read the real form
            replace(node, form)
        count += 1
    for node in reversed([n for n in gm.graph.nodes if _is_complex(n)]):
        if not node.users:
            gm.graph.erase_node(node)
    remaining = [n.name for n in gm.graph.nodes if _is_complex(n)]
    if remaining:
        raise ModelError(
            f"node {remaining[0]}: a complex value the model returns or reads otherwise; kiln's "
            "programs take and return real tensors (torch.view_as_real)"
        )
    return finish(gm, count)
