"""Normalisations decomposed into means, products and rsqrt: layer, RMS, group and instance norm,
and a batch norm no convolution before it absorbed (decompose.fold_batch_norm folds the others).

Registered in kiln.frontend.decompose's table (so OPS.md lists them) when kiln.frontend.normalize
imports this module; the decomposition contract is decompose's.
"""

from __future__ import annotations

import math

import torch
from torch.fx import Node

from kiln.errors import ModelError
from kiln.frontend.decompose import (
    _affine,
    _channel_affine,
    _normalised,
    _rank,
    _shape,
    decomposes,
)
from kiln.frontend.rewrite import Emitter, attribute, op_type, value

aten = torch.ops.aten


# ---- normalisations --------------------------------------------------------------------------------
@decomposes(
    aten.layer_norm.default, into="mean.dim, sub, mul, mean.dim, add eps, rsqrt, mul; then mul weight, add bias"
)
def layer_norm(emit, node, a):
    dims = list(range(-len(a["normalized_shape"]), 0))
    return _affine(emit, _normalised(emit, a["input"], dims, a["eps"]), a["weight"], a["bias"])


@decomposes(aten.rms_norm.default, into="mul, mean.dim, add eps, rsqrt, mul; then mul weight")
def rms_norm(emit, node, a):
    x = a["input"]
    dims = list(range(-len(a["normalized_shape"]), 0))
    eps = torch.finfo(value(x).dtype).eps if a["eps"] is None else a["eps"]
    mean_square = emit(aten.mean.dim, emit(aten.mul.Tensor, x, x), dims, True)
    y = emit(aten.mul.Tensor, x, emit(aten.rsqrt.default, emit(aten.add.Tensor, mean_square, eps)))
    return _affine(emit, y, a["weight"], None)


@decomposes(
    aten.group_norm.default,
    into="view [N, G, -1], layer_norm's steps over the last dim, view back; mul/add per-channel constants",
)
def group_norm(emit, node, a):
    x = a["input"]
    shape = _shape(x)
    grouped = emit(aten.reshape.default, x, [shape[0], a["num_groups"], math.prod(shape[1:]) // a["num_groups"]])
    return _channel_affine(emit, emit(aten.reshape.default, _normalised(emit, grouped, [2], a["eps"]), shape), a)


@decomposes(
    aten.instance_norm.default,
    into="over the spatial dims: layer_norm's steps; mul/add per-channel constants "
    "(with running statistics: as batch_norm)",
)
def instance_norm(emit, node, a):
    if not a["use_input_stats"]:
        return _batch_norm(emit, a["input"], a["weight"], a["bias"], a["running_mean"], a["running_var"], a["eps"])
    x = a["input"]
    return _channel_affine(emit, _normalised(emit, x, list(range(2, _rank(x))), a["eps"]), a)


@decomposes(
    aten.batch_norm.default,
    into="not after a conv: a depthwise 1x1 conv2d (scale as weight, shift as bias), views around it "
    "for other than 4-D input; a 2-D or 3-D input's batch permuted into the rows of one image",
)
def batch_norm(emit, node, a):
    if a["training"]:
        raise ModelError(f"node {node.name} (aten.batch_norm): batch norm in training mode; call model.eval()")
    return _batch_norm(emit, a["input"], a["weight"], a["bias"], a["running_mean"], a["running_var"], a["eps"])


def _batch_norm(emit: Emitter, x: Node, weight, bias, mean, var, eps: float) -> Node:
    constants = [attribute(emit.gm, p) for p in (weight, bias, mean, var)]
    if any(c is None for c, p in zip(constants, (weight, bias, mean, var)) if p is not None) or mean is None:
        raise ModelError(
            f"node {emit.anchor.name} ({op_type(emit.anchor)}): kiln folds batch norms whose "
            "statistics and affine parameters are constants (buffers or parameters)"
        )
    gamma, beta, mean, var = constants
    scale = torch.rsqrt(var + eps) * (1 if gamma is None else gamma)
    shift = (0 if beta is None else beta) - mean * scale
    shape = _shape(x)
    batch, channels = shape[:2]
    if len(shape) < 4 and batch > 1:  # the batch as rows of one image: the NPU's convolutions take batch 1
        rows = emit(aten.permute.default, x, [1, 0, *range(2, len(shape))])
        y = _depthwise(emit, emit(aten.reshape.default, rows, [1, channels, batch, math.prod(shape[2:])]), scale, shift)
        y = emit(aten.reshape.default, y, [channels, batch, *shape[2:]])
        return emit(aten.permute.default, y, [1, 0, *range(2, len(shape))])
    if len(shape) != 4:
        x = emit(aten.reshape.default, x, [batch, channels, math.prod(shape[2:]), 1])
    y = _depthwise(emit, x, scale, shift)
    return emit(aten.reshape.default, y, shape) if len(shape) != 4 else y


def _depthwise(emit: Emitter, x: Node, scale: torch.Tensor, shift: torch.Tensor) -> Node:
    """x * scale + shift per channel of the 4-D `x`: a depthwise 1x1 conv2d."""
    channels = _shape(x)[1]
    weight = emit.constant(scale.reshape(channels, 1, 1, 1), "scale")
    return emit(aten.conv2d.default, x, weight, emit.constant(shift, "shift"), [1, 1], [0, 0], [1, 1], channels)
