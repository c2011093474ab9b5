"""Convolutions and pooling decomposed into the 2-D forms kiln lowers: 1-D convolutions and pools
on [N, C, 1, L], "same" padding made explicit, grouped transpose convolutions by group, adaptive
pools as whole-window pools and reductions.

Registered in kiln.frontend.decompose's tables (so OPS.md lists them) when kiln.frontend.normalize
imports this module; the decomposition contract is decompose's.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from kiln.errors import ModelError
from kiln.frontend.decompose import (
    MULTI_OUTPUT,
    _batched,
    _explicit_padding,
    _ints,
    _rank,
    _reshaped,
    _shape,
    _unbatched,
    decomposes,
)
from kiln.frontend.rewrite import Emitter, attribute, op_type, value

aten = torch.ops.aten


# ---- convolutions and pools ----------------------------------------------------------------------------------
@decomposes(aten.conv1d.default, aten.conv1d.padding, into="unsqueeze, conv2d on [N, C, 1, L], squeeze")
def conv1d(emit, node, a):
    unbatched = _rank(a["input"]) == 2
    x = _batched(emit, a["input"], unbatched)
    out_channels, in_channels, k = _shape(a["weight"])
    dilation = _ints(a["dilation"], 1)
    x, padding = _explicit_padding(emit, x, a["padding"], [k], dilation)
    weight = _reshaped(emit, a["weight"], [out_channels, in_channels, 1, k], "weight")
    y = emit(
        aten.conv2d.default,
        emit(aten.unsqueeze.default, x, 2),
        weight,
        a["bias"],
        [1, *_ints(a["stride"], 1)],
        [0, *padding],
        [1, *dilation],
        a["groups"],
    )
    return _unbatched(emit, emit(aten.squeeze.dim, y, 2), unbatched)


@decomposes(aten.conv2d.padding, into='conv2d with explicit padding ("same" with an odd total: constant_pad_nd first)')
def conv2d_padding(emit, node, a):
    dilation = _ints(a["dilation"], 2)
    x, padding = _explicit_padding(emit, a["input"], a["padding"], _shape(a["weight"])[2:], dilation)
    return emit(aten.conv2d.default, x, a["weight"], a["bias"], _ints(a["stride"], 2), padding, dilation, a["groups"])


@decomposes(aten.conv_transpose1d.default, into="unsqueeze, conv_transpose2d on [N, C, 1, L], squeeze")
def conv_transpose1d(emit, node, a):
    unbatched = _rank(a["input"]) == 2
    x = emit(aten.unsqueeze.default, _batched(emit, a["input"], unbatched), 2)
    in_channels, out_channels, k = _shape(a["weight"])
    weight = _reshaped(emit, a["weight"], [in_channels, out_channels, 1, k], "weight")
    y = emit(
        aten.conv_transpose2d.input,
        x,
        weight,
        a["bias"],
        [1, *_ints(a["stride"], 1)],
        [0, *_ints(a["padding"], 1)],
        [0, *_ints(a["output_padding"], 1)],
        a["groups"],
        [1, *_ints(a["dilation"], 1)],
    )
    return _unbatched(emit, emit(aten.squeeze.dim, y, 2), unbatched)


def _as_2d(emit: Emitter, x: Node, target, args: list, out: Node) -> Node:
    """A 1-D op on [N, C, L] (or [C, L]) as its 2-D form on [N, C, 1, L], squeezed back."""
    unbatched = _rank(x) == 2
    y = emit(target, emit(aten.unsqueeze.default, _batched(emit, x, unbatched), 2), *args)
    return _unbatched(emit, emit(aten.squeeze.dim, y, 2), unbatched)


def _window_2d(a) -> list[list[int]]:
    """A 1-D pool's kernel, stride (the kernel's when not given) and padding, each as the 2-D
    pool's over [1, L]."""
    kernel = _ints(a["kernel_size"], 1)
    stride = _ints(a["stride"], 1) if a["stride"] else kernel
    return [[1, *kernel], [1, *stride], [0, *_ints(a["padding"], 1)]]


@decomposes(aten.avg_pool1d.default, into="unsqueeze, avg_pool2d on [N, C, 1, L], squeeze")
def avg_pool1d(emit, node, a):
    args = [*_window_2d(a), a["ceil_mode"], a["count_include_pad"]]
    return _as_2d(emit, a["self"], aten.avg_pool2d.default, args, node)


@decomposes(aten.max_pool1d.default, into="unsqueeze, max_pool2d on [N, C, 1, L], squeeze")
def max_pool1d(emit, node, a):
    args = [*_window_2d(a), [1, *_ints(a["dilation"], 1)], a["ceil_mode"]]
    return _as_2d(emit, a["self"], aten.max_pool2d.default, args, node)


@decomposes(aten.adaptive_avg_pool1d.default, into="unsqueeze, adaptive_avg_pool2d on [N, C, 1, L], squeeze")
def adaptive_avg_pool1d(emit, node, a):
    return _as_2d(emit, a["self"], aten.adaptive_avg_pool2d.default, [[1, *_ints(a["output_size"], 1)]], node)


def _adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows along one dim: [floor(i * size / out), ceil((i + 1) * size / out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _pool_geometry(size: int, out: int) -> tuple[int, int] | None:
    """(kernel, stride) when the adaptive windows along a dim are one pool's: equal sizes at equal steps,
    and either not overlapping or with a stride the NPU moves (1..3); else None."""
    windows = _adaptive_windows(size, out)
    sizes = {end - start for start, end in windows}
    steps = {b[0] - a[0] for a, b in zip(windows, windows[1:])}
    if len(sizes) != 1 or len(steps) > 1:
        return None
    kernel = sizes.pop()
    stride = steps.pop() if steps else kernel
    return (kernel, stride) if kernel <= stride or stride <= 3 else None  # kiln.partition.support's STRIDE_MAX


def _adaptive_pool2d(emit: Emitter, x: Node, out: list[int], maximum: bool) -> Node | None:
    """An adaptive max (or average) pool over the last two dims of `x` to `out`: one pool when the
    windows along both dims are a pool's (None for an average pool to equal whole windows, which kiln
    lowers as it is); else per dim (H, then W) a pool along that dim, or where the windows differ in
    size, per output position a slice and an amax (mean) over that dim, and a cat."""
    sizes = _shape(x)[-2:]
    geometry = [_pool_geometry(size, o) for size, o in zip(sizes, out)]

    def pool(y: Node, kernel: list[int], stride: list[int]) -> Node:
        if maximum:
            return emit(aten.max_pool2d.default, y, kernel, stride, [0, 0], [1, 1], False)
        return emit(aten.avg_pool2d.default, y, kernel, stride, [0, 0], False, True, None)

    if all(geometry):
        if not maximum and all(size % o == 0 for size, o in zip(sizes, out)):
            return None
        return pool(x, [k for k, _ in geometry], [s for _, s in geometry])
    reduce = aten.amax.default if maximum else aten.mean.dim
    for axis, (size, o, g) in enumerate(zip(sizes, out, geometry)):
        dim = _rank(x) - 2 + axis
        if size == o:
            continue
        if g is not None:
            kernel, stride = [1, 1], [1, 1]
            kernel[axis], stride[axis] = g
            x = pool(x, kernel, stride)
            continue
        parts = []
        for start, end in _adaptive_windows(size, o):
            window = x if (start, end) == (0, size) else emit(aten.slice.Tensor, x, dim, start, end)
            parts.append(emit(reduce, window, [dim], True))
        x = parts[0] if len(parts) == 1 else emit(aten.cat.default, parts, dim)
    return x


@decomposes(
    aten.adaptive_avg_pool2d.default,
    into="PyTorch's windows [floor(i * H / oh), ceil((i + 1) * H / oh)): equal whole windows: kept; windows "
    "of one size at equal steps (not overlapping, or stride 1..3): avg_pool2d; else separably, along H "
    "then W: avg_pool2d along that dim, or per output position a slice and mean.dim, then cat",
)
def adaptive_avg_pool2d(emit, node, a):
    return _adaptive_pool2d(emit, a["self"], _shape(node)[-2:], maximum=False)


def _part(emit: Emitter, node: Node | None, dim: int, index: int, count: int, name: str) -> Node | None:
    """Part `index` of `count` equal parts of `node` along `dim` (a new constant for a constant)."""
    if node is None:
        return None
    size = _shape(node)[dim] // count
    tensor = attribute(emit.gm, node)
    if tensor is not None:
        return emit.constant(tensor.narrow(dim, index * size, size), f"{name}{index}")
    return emit(aten.slice.Tensor, node, dim, index * size, (index + 1) * size)


@decomposes(aten.conv_transpose2d.input, into="groups > 1: one conv_transpose2d per group on slices, then cat")
def grouped_conv_transpose2d(emit, node, a):
    groups = a["groups"]
    if groups == 1:
        return None
    channel = _rank(a["input"]) - 3
    outputs = [
        emit(
            aten.conv_transpose2d.input,
            _part(emit, a["input"], channel, g, groups, "input"),
            _part(emit, a["weight"], 0, g, groups, "weight"),
            _part(emit, a["bias"], 0, g, groups, "bias"),
            a["stride"],
            a["padding"],
            a["output_padding"],
            1,
            a["dilation"],
        )
        for g in range(groups)
    ]
    return emit(aten.cat.default, outputs, channel)


@decomposes(
    aten.adaptive_max_pool2d.default,
    aten.adaptive_max_pool1d.default,
    into="values: as adaptive_avg_pool2d, with max_pool2d and amax (equal whole windows: max_pool2d with "
    "kernel = stride = input / output; 1-D: on [N, C, 1, L]); indices: refused if read",
    table=MULTI_OUTPUT,
)
def adaptive_max_pool(emit, node, a, index):
    if index != 0:
        if not any(user.users for user in node.users if user.args[1] == index):
            return a["self"]  # export reads the indices even when nothing uses them: a dead getitem, dropped
        raise ModelError(
            f"node {node.name} ({op_type(node)}): kiln computes an adaptive max pool's values, not its "
            "indices; pass return_indices=False"
        )
    x = a["self"]
    if node.target is aten.adaptive_max_pool2d.default:
        return _adaptive_pool2d(emit, x, list(value(node)[0].shape[-2:]), maximum=True)
    unbatched = _rank(x) == 2
    x2 = emit(aten.unsqueeze.default, _batched(emit, x, unbatched), 2)
    y = _adaptive_pool2d(emit, x2, [1, value(node)[0].shape[-1]], maximum=True)
    return _unbatched(emit, emit(aten.squeeze.dim, y, 2), unbatched)
