"""More single-operator models: every op of kiln's vocabulary, each in several shapes and
operand kinds, for the coverage benchmark against ExecuTorch (bench/coverage.py --executorch).

Same form as tests/compiler/operator_cases.py (whose 46 cases and names stay as they are; other tests
use them): CASES maps a name to (module factory, inputs factory); names are unique across
both modules. Only torch is imported (and
operator_cases, for its helpers), so ExecuTorch's environment can load this file without kiln.

Families: conv1d/conv2d (depthwise, grouped, strided, dilated, rectangular), transposed
convolution, linear, matmul/bmm/mm with runtime and constant operands, add/sub/mul/div/pow
with tensor, broadcast, constant and scalar operands, minimum/maximum, the unary functions,
softmax/log_softmax, layer/group/batch norm, mean/sum/amax/amin over several dims, average
and max pools (large strides, global), adaptive average pools, permute/transpose, slice/
select/strided slice, cat/stack, expand/repeat, pad, upsample, flatten/reshape/squeeze,
comparisons with where (and any/all of their masks), gathers, cumsum.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tests.compiler.operator_cases import Fn, _seeded


def _x(*shape, seed=0, scale=1.0):
    """An inputs factory: one seeded normal tensor of `shape`."""
    return lambda: (_seeded(*shape, seed=seed, scale=scale),)


def _pos(*shape, seed=0):
    """An inputs factory: one strictly positive tensor (for log, sqrt, reciprocal, pow)."""
    return lambda: (_seeded(*shape, seed=seed).abs() + 0.1,)


def _two(a, b):
    """An inputs factory: two seeded normal tensors of shapes `a` and `b`."""
    return lambda: (_seeded(*a, seed=0), _seeded(*b, seed=1))


def _seeded_module(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """A module factory whose parameters are the same on every call."""

    def build():
        torch.manual_seed(0)
        return make().eval()

    return build


def _param(*shape, seed=7, scale=1.0):
    return nn.Parameter(_seeded(*shape, seed=seed, scale=scale), requires_grad=False)


def _fn(fn: Callable, **parameters) -> Callable[[], nn.Module]:
    return lambda: Fn(fn, **{k: (v() if callable(v) else v) for k, v in parameters.items()})


def _bn2d(channels: int) -> nn.Module:
    bn = nn.BatchNorm2d(channels)
    bn.running_mean.copy_(_seeded(channels, seed=1) * 0.3)
    bn.running_var.copy_(_seeded(channels, seed=2).abs() + 0.5)
    bn.weight.data.copy_(_seeded(channels, seed=3) * 0.5 + 1)
    bn.bias.data.copy_(_seeded(channels, seed=4) * 0.2)
    return bn.eval()


M = _seeded_module
IMG = _x(1, 8, 8, 8)  # the unary functions' 4-D input
SEQ = _x(1, 6, 16)  # their 3-D input
ROW = _x(2, 24)  # their 2-D input

CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple]]] = {
    # convolutions
    "conv2d_3x3": (M(lambda: nn.Conv2d(3, 8, 3, padding=1)), _x(1, 3, 16, 16)),
    "conv2d_1x1": (M(lambda: nn.Conv2d(16, 24, 1)), _x(1, 16, 8, 8)),
    "conv2d_5x5_valid": (M(lambda: nn.Conv2d(4, 8, 5)), _x(1, 4, 12, 12)),
    "conv2d_stride2": (M(lambda: nn.Conv2d(8, 16, 3, stride=2, padding=1)), _x(1, 8, 16, 16)),
    "conv2d_stride3_odd": (M(lambda: nn.Conv2d(3, 4, 3, stride=3)), _x(1, 3, 17, 13)),
    "conv2d_dilated": (M(lambda: nn.Conv2d(8, 8, 3, dilation=2, padding=2)), _x(1, 8, 12, 12)),
    "conv2d_depthwise": (M(lambda: nn.Conv2d(16, 16, 3, padding=1, groups=16)), _x(1, 16, 10, 10)),
    "conv2d_depthwise_x2": (M(lambda: nn.Conv2d(8, 16, 3, padding=1, groups=8)), _x(1, 8, 10, 10)),
    "conv2d_depthwise_stride2": (M(lambda: nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)), _x(1, 16, 12, 12)),
    "conv2d_grouped": (M(lambda: nn.Conv2d(16, 16, 3, padding=1, groups=4)), _x(1, 16, 8, 8)),
    "conv2d_no_bias": (M(lambda: nn.Conv2d(8, 8, 3, bias=False)), _x(1, 8, 9, 9)),
    "conv2d_1x7": (M(lambda: nn.Conv2d(4, 8, (1, 7), padding=(0, 3))), _x(1, 4, 8, 20)),
    "conv2d_asym_pad": (M(lambda: nn.Conv2d(4, 4, 3, padding=(0, 2))), _x(1, 4, 10, 6)),
    "conv2d_relu": (M(lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())), _x(1, 3, 12, 12)),
    "conv1d_stride2": (M(lambda: nn.Conv1d(8, 16, 5, stride=2, padding=2)), _x(1, 8, 40)),
    "conv1d_dilated": (M(lambda: nn.Conv1d(6, 6, 3, dilation=3, padding=3)), _x(1, 6, 32)),
    "conv1d_depthwise": (M(lambda: nn.Conv1d(12, 12, 3, groups=12, padding=1)), _x(1, 12, 24)),
    "conv1d_1x1": (M(lambda: nn.Conv1d(16, 8, 1)), _x(1, 16, 20)),
    "conv_transpose2d_s2": (M(lambda: nn.ConvTranspose2d(8, 4, 2, stride=2)), _x(1, 8, 6, 6)),
    "conv_transpose2d_k3": (
        M(lambda: nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)),
        _x(1, 4, 5, 5),
    ),
    # linear layers and matrix products
    "linear_2d": (M(lambda: nn.Linear(40, 16)), _x(2, 40)),
    "linear_3d": (M(lambda: nn.Linear(16, 32)), _x(1, 10, 16)),
    "linear_no_bias": (M(lambda: nn.Linear(64, 10, bias=False)), _x(1, 64)),
    "linear_256": (M(lambda: nn.Linear(256, 128)), _x(1, 256)),
    "matmul_runtime_3d": (_fn(lambda s, a, b: a @ b), _two((1, 8, 16), (1, 16, 12))),
    "matmul_runtime_2d": (_fn(lambda s, a, b: a @ b), _two((6, 8), (8, 10))),
    "matmul_runtime_4d": (_fn(lambda s, a, b: a @ b), _two((1, 2, 6, 8), (1, 2, 8, 6))),
    "matmul_transposed": (_fn(lambda s, q, k: q @ k.transpose(-1, -2)), _two((1, 2, 6, 8), (1, 2, 6, 8))),
    "matmul_const": (_fn(lambda s, x: x @ s.w, w=lambda: _param(16, 12)), _x(1, 8, 16)),
    "mm_const_left": (_fn(lambda s, x: torch.mm(s.w, x), w=lambda: _param(5, 8)), _x(8, 6)),
    "bmm_runtime": (_fn(lambda s, a, b: torch.bmm(a, b)), _two((4, 6, 8), (4, 8, 5))),
    "bmm_const": (_fn(lambda s, x: torch.bmm(x, s.w), w=lambda: _param(2, 8, 4)), _x(2, 6, 8)),
    # binary arithmetic: tensor, broadcast, constant and scalar operands
    "add_tensor": (_fn(lambda s, a, b: a + b), _two((1, 8, 8, 8), (1, 8, 8, 8))),
    "add_broadcast_channel": (_fn(lambda s, a, b: a + b), _two((1, 8, 6, 6), (1, 8, 1, 1))),
    "add_broadcast_row": (_fn(lambda s, a, b: a + b), _two((1, 6, 16), (1, 1, 16))),
    "add_const": (_fn(lambda s, x: x + s.c, c=lambda: _param(1, 8, 1, 1)), _x(1, 8, 6, 6)),
    "add_scalar": (_fn(lambda s, x: x + 1.5), _x(1, 6, 16)),
    "sub_tensor": (_fn(lambda s, a, b: a - b), _two((1, 6, 16), (1, 6, 16))),
    "sub_broadcast": (_fn(lambda s, a, b: a - b), _two((2, 24), (1, 24))),
    "sub_const": (_fn(lambda s, x: x - s.c, c=lambda: _param(16)), _x(1, 6, 16)),
    "rsub_scalar": (_fn(lambda s, x: 2.0 - x), _x(1, 8, 8, 8)),
    "mul_tensor": (_fn(lambda s, a, b: a * b), _two((1, 8, 8, 8), (1, 8, 8, 8))),
    "mul_broadcast": (_fn(lambda s, a, b: a * b), _two((1, 8, 6, 6), (1, 1, 6, 6))),
    "mul_const": (_fn(lambda s, x: x * s.c, c=lambda: _param(1, 6, 1)), _x(1, 6, 16)),
    "mul_scalar": (_fn(lambda s, x: x * 0.75), _x(2, 24)),
    "div_broadcast": (_fn(lambda s, a, b: a / (b.abs() + 0.5)), _two((1, 8, 6, 6), (1, 8, 1, 1))),
    "div_const": (
        _fn(lambda s, x: x / s.c, c=lambda: nn.Parameter(_seeded(16, seed=7).abs() + 0.5, requires_grad=False)),
        _x(1, 6, 16),
    ),
    "div_by_tensor": (_fn(lambda s, a, b: a / b), lambda: (_seeded(1, 6, 16), _seeded(1, 6, 16, seed=1).abs() + 0.5)),
    "pow_2": (_fn(lambda s, x: x**2), _x(1, 8, 8, 8)),
    "pow_3": (_fn(lambda s, x: torch.pow(x, 3)), _x(1, 6, 16)),
    "pow_half": (_fn(lambda s, x: x**0.5), _pos(1, 6, 16)),
    "minimum_broadcast": (_fn(lambda s, a, b: torch.minimum(a, b)), _two((1, 8, 6, 6), (1, 8, 1, 1))),
    "maximum_const": (_fn(lambda s, x: torch.maximum(x, s.c), c=lambda: _param(16, scale=0.3)), _x(1, 6, 16)),
    "maximum_4d": (_fn(lambda s, a, b: torch.maximum(a, b)), _two((1, 4, 8, 8), (1, 4, 8, 8))),
    # unary functions
    "relu_4d": (lambda: nn.ReLU(), IMG),
    "relu_2d": (lambda: nn.ReLU(), ROW),
    "relu6": (lambda: nn.ReLU6(), _x(1, 8, 8, 8, scale=4.0)),
    "hardtanh": (lambda: nn.Hardtanh(-0.5, 0.5), IMG),
    "clamp": (_fn(lambda s, x: torch.clamp(x, -1.0, 2.0)), SEQ),
    "clamp_min": (_fn(lambda s, x: torch.clamp(x, min=-0.25)), IMG),
    "sigmoid_4d": (lambda: nn.Sigmoid(), IMG),
    "sigmoid_2d": (lambda: nn.Sigmoid(), ROW),
    "tanh_4d": (lambda: nn.Tanh(), IMG),
    "tanh_3d": (lambda: nn.Tanh(), SEQ),
    "hardswish": (lambda: nn.Hardswish(), _x(1, 8, 8, 8, scale=3.0)),
    "hardsigmoid": (lambda: nn.Hardsigmoid(), _x(1, 8, 8, 8, scale=3.0)),
    "leaky_relu": (lambda: nn.LeakyReLU(0.1), IMG),
    "gelu_3d": (lambda: nn.GELU(), SEQ),
    "silu_2d": (lambda: nn.SiLU(), ROW),
    "elu_alpha": (lambda: nn.ELU(0.5), SEQ),
    "celu": (lambda: nn.CELU(1.5), IMG),
    "selu": (lambda: nn.SELU(), IMG),
    "mish": (lambda: nn.Mish(), IMG),
    "softplus": (lambda: nn.Softplus(), IMG),
    "logsigmoid": (lambda: nn.LogSigmoid(), SEQ),
    "exp": (_fn(lambda s, x: torch.exp(x)), SEQ),
    "log": (_fn(lambda s, x: torch.log(x)), _pos(1, 6, 16)),
    "sqrt_3d": (_fn(lambda s, x: torch.sqrt(x)), _pos(1, 6, 16)),
    "rsqrt_2d": (_fn(lambda s, x: torch.rsqrt(x)), _pos(2, 24)),
    "reciprocal": (_fn(lambda s, x: torch.reciprocal(x)), _pos(1, 8, 8, 8)),
    "abs_3d": (_fn(lambda s, x: torch.abs(x)), SEQ),
    "neg_2d": (_fn(lambda s, x: torch.neg(x)), ROW),
    "cos": (_fn(lambda s, x: torch.cos(x)), IMG),
    "erf": (_fn(lambda s, x: torch.erf(x)), SEQ),
    "sign": (_fn(lambda s, x: torch.sign(x)), SEQ),
    "round": (_fn(lambda s, x: torch.round(x * 3)), SEQ),
    "ceil": (_fn(lambda s, x: torch.ceil(x * 3)), SEQ),
    "trunc": (_fn(lambda s, x: torch.trunc(x * 3)), SEQ),
    # softmax
    "softmax_last": (lambda: nn.Softmax(dim=-1), _x(1, 4, 16)),
    "softmax_2d": (lambda: nn.Softmax(dim=-1), _x(2, 40)),
    "softmax_channels": (lambda: nn.Softmax(dim=1), _x(1, 8, 6, 6)),
    "log_softmax_last": (lambda: nn.LogSoftmax(dim=-1), _x(1, 4, 16)),
    "log_softmax_channels": (lambda: nn.LogSoftmax(dim=1), _x(1, 8, 6, 6)),
    # normalisation
    "layer_norm_wide": (M(lambda: nn.LayerNorm(64)), _x(1, 10, 64)),
    "layer_norm_2dims": (M(lambda: nn.LayerNorm([8, 8])), _x(1, 4, 8, 8)),
    "layer_norm_no_affine": (M(lambda: nn.LayerNorm(16, elementwise_affine=False)), _x(1, 6, 16)),
    "group_norm_alone": (M(lambda: nn.GroupNorm(4, 16)), _x(1, 16, 6, 6)),
    "instance_norm_groups": (M(lambda: nn.GroupNorm(8, 8)), _x(1, 8, 6, 6)),
    "batch_norm2d": (lambda: _bn2d(8), _x(1, 8, 6, 6)),
    # reductions
    "mean_last": (_fn(lambda s, x: x.mean(-1, keepdim=True)), _x(1, 6, 16)),
    "mean_channels": (_fn(lambda s, x: x.mean(1, keepdim=True)), _x(1, 8, 6, 6)),
    "mean_hw": (_fn(lambda s, x: x.mean((2, 3), keepdim=True)), _x(1, 8, 6, 6)),
    "mean_hw_flat": (_fn(lambda s, x: x.mean((2, 3))), _x(1, 8, 7, 7)),
    "mean_chw": (_fn(lambda s, x: x.mean((1, 2, 3), keepdim=True)), _x(1, 4, 6, 6)),
    "sum_last": (_fn(lambda s, x: x.sum(-1, keepdim=True)), _x(1, 6, 16)),
    "sum_channels": (_fn(lambda s, x: x.sum(1)), _x(1, 8, 6, 6)),
    "sum_hw": (_fn(lambda s, x: x.sum((2, 3), keepdim=True)), _x(1, 8, 6, 6)),
    "amax_last": (_fn(lambda s, x: x.amax(-1, keepdim=True)), _x(1, 6, 16)),
    "amax_channels": (_fn(lambda s, x: x.amax(1, keepdim=True)), _x(1, 8, 6, 6)),
    "amax_hw": (_fn(lambda s, x: x.amax((2, 3))), _x(1, 8, 6, 6)),
    "amin_last": (_fn(lambda s, x: x.amin(-1)), _x(1, 6, 16)),
    "amin_channels": (_fn(lambda s, x: x.amin(1, keepdim=True)), _x(1, 8, 6, 6)),
    # pools
    "avg_pool2d_2x2": (lambda: nn.AvgPool2d(2), _x(1, 8, 8, 8)),
    "avg_pool2d_3x3_pad": (lambda: nn.AvgPool2d(3, stride=1, padding=1), _x(1, 8, 8, 8)),
    "avg_pool2d_s4": (lambda: nn.AvgPool2d(4, stride=4), _x(1, 8, 16, 16)),
    "avg_pool2d_global": (lambda: nn.AvgPool2d(7), _x(1, 16, 7, 7)),
    "avg_pool2d_global_16": (lambda: nn.AvgPool2d(16), _x(1, 8, 16, 16)),
    "max_pool2d_2x2": (lambda: nn.MaxPool2d(2), _x(1, 8, 8, 8)),
    "max_pool2d_3x3_s2_pad": (lambda: nn.MaxPool2d(3, stride=2, padding=1), _x(1, 8, 16, 16)),
    "max_pool2d_ceil": (lambda: nn.MaxPool2d(3, stride=2, ceil_mode=True), _x(1, 4, 9, 9)),
    "max_pool2d_s8": (lambda: nn.MaxPool2d(8, stride=8), _x(1, 4, 16, 16)),
    "adaptive_avg_pool2d_1": (lambda: nn.AdaptiveAvgPool2d(1), _x(1, 16, 8, 8)),
    "adaptive_avg_pool2d_div": (lambda: nn.AdaptiveAvgPool2d(4), _x(1, 8, 16, 16)),
    "adaptive_avg_pool2d_nondiv": (lambda: nn.AdaptiveAvgPool2d(3), _x(1, 8, 10, 10)),
    "adaptive_avg_pool2d_rect": (lambda: nn.AdaptiveAvgPool2d((2, 5)), _x(1, 4, 8, 10)),
    "adaptive_max_pool2d_1": (lambda: nn.AdaptiveMaxPool2d(1), _x(1, 8, 6, 6)),
    # data movement
    "permute_3d": (_fn(lambda s, x: x.permute(0, 2, 1)), _x(1, 6, 16)),
    "permute_nhwc": (_fn(lambda s, x: x.permute(0, 2, 3, 1)), _x(1, 8, 6, 5)),
    "permute_4d_mixed": (_fn(lambda s, x: x.permute(0, 3, 1, 2)), _x(1, 8, 6, 5)),
    "permute_4d_swap12": (_fn(lambda s, x: x.permute(0, 2, 1, 3)), _x(1, 4, 6, 8)),
    "transpose_last2": (_fn(lambda s, x: x.transpose(-1, -2)), _x(1, 4, 6, 8)),
    "transpose_2d": (_fn(lambda s, x: x.t()), _x(12, 20)),
    "slice_channels": (_fn(lambda s, x: x[:, 2:6]), _x(1, 8, 6, 6)),
    "slice_last": (_fn(lambda s, x: x[..., 3:13]), _x(1, 6, 16)),
    "slice_step2": (_fn(lambda s, x: x[..., ::2]), _x(1, 6, 16)),
    "slice_hw_step2": (_fn(lambda s, x: x[:, :, ::2, ::2]), _x(1, 4, 8, 8)),
    "narrow": (_fn(lambda s, x: torch.narrow(x, 2, 1, 4)), _x(1, 4, 8, 8)),
    "select_last": (_fn(lambda s, x: x[..., 5]), _x(1, 6, 16)),
    "select_channel_4d": (_fn(lambda s, x: x[:, 3]), _x(1, 8, 6, 6)),
    "cat_channels": (_fn(lambda s, a, b: torch.cat([a, b], 1)), _two((1, 4, 6, 6), (1, 8, 6, 6))),
    "cat_last": (_fn(lambda s, a, b: torch.cat([a, b], -1)), _two((1, 6, 16), (1, 6, 8))),
    "cat_three": (_fn(lambda s, a, b: torch.cat([a, b, a], 1)), _two((1, 3, 8), (1, 5, 8))),
    "stack_last": (_fn(lambda s, a, b: torch.stack([a, b], -1)), _two((1, 6, 8), (1, 6, 8))),
    "expand_4d": (_fn(lambda s, a, b: a.expand(1, 8, 6, 6) + b), _two((1, 8, 1, 1), (1, 8, 6, 6))),
    "expand_rows": (_fn(lambda s, x: x.expand(4, 24)), _x(1, 24)),
    "repeat_4d": (_fn(lambda s, x: x.repeat(1, 1, 2, 3)), _x(1, 4, 4, 4)),
    "repeat_2d": (_fn(lambda s, x: x.repeat(3, 1)), _x(2, 24)),
    "pad_constant": (_fn(lambda s, x: F.pad(x, [1, 1, 2, 2])), _x(1, 4, 6, 6)),
    "pad_constant_value": (_fn(lambda s, x: F.pad(x, [0, 3], value=0.5)), _x(1, 6, 16)),
    "pad_reflect_3d": (_fn(lambda s, x: F.pad(x, [2, 2], mode="reflect")), _x(1, 6, 16)),
    "pad_replicate": (_fn(lambda s, x: F.pad(x, [1, 2, 1, 2], mode="replicate")), _x(1, 4, 6, 6)),
    "pad_replicate_3d": (_fn(lambda s, x: F.pad(x, [3, 1], mode="replicate")), _x(1, 6, 16)),
    "upsample_nearest_2x": (lambda: nn.Upsample(scale_factor=2, mode="nearest"), _x(1, 4, 6, 6)),
    "upsample_nearest_3x": (lambda: nn.Upsample(scale_factor=3, mode="nearest"), _x(1, 4, 4, 5)),
    "upsample_bilinear_2x": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), _x(1, 4, 6, 6)),
    "upsample_bilinear_aligned": (
        lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
        _x(1, 4, 5, 5),
    ),
    "flatten_4d": (lambda: nn.Flatten(), _x(1, 4, 6, 6)),
    "reshape_3d_to_4d": (_fn(lambda s, x: x.reshape(1, 6, 4, 4)), _x(1, 6, 16)),
    "view_merge_last": (_fn(lambda s, x: x.view(1, 8, 36)), _x(1, 8, 6, 6)),
    "squeeze_unsqueeze": (_fn(lambda s, x: x.squeeze(1).unsqueeze(-1)), _x(1, 1, 6, 16)),
    "channel_shuffle": (_fn(lambda s, x: x.view(1, 2, 4, 6, 6).transpose(1, 2).reshape(1, 8, 6, 6)), _x(1, 8, 6, 6)),
    "pixel_shuffle": (lambda: nn.PixelShuffle(2), _x(1, 8, 4, 4)),
    # comparisons and where
    "where_ge_scalar": (_fn(lambda s, x: torch.where(x >= 0.3, x, 0.0)), _x(1, 8, 8, 8)),
    "where_le_tensor": (_fn(lambda s, a, b: torch.where(a <= b, a, b)), _two((1, 8, 6, 6), (1, 8, 6, 6))),
    "where_ne": (
        _fn(lambda s, a, b: torch.where(torch.round(a) != torch.round(b), a, -b)),
        _two((1, 6, 16), (1, 6, 16)),
    ),
    "where_gt_broadcast": (_fn(lambda s, a, b: torch.where(a > b, a, b)), _two((1, 8, 6, 6), (1, 8, 1, 1))),
    "where_any_rows": (
        _fn(lambda s, a, b: torch.where((a > 0.5).any(dim=-1, keepdim=True), a, b)),
        _two((1, 6, 16), (1, 6, 16)),
    ),
    "where_all_channels": (_fn(lambda s, x: torch.where((x > -1.0).all(dim=1, keepdim=True), x, 0.0)), _x(1, 8, 6, 6)),
    # gathers: an embedding of int64 tokens (Ethos-U85: GATHER), index_select by constant indices
    "embedding_tokens": (
        _seeded_module(lambda: nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 8))),
        lambda: (torch.randint(0, 50, (1, 10), generator=torch.Generator().manual_seed(0)),),
    ),
    "index_select_const": (_fn(lambda s, x: torch.index_select(x * 2.0, 1, torch.tensor([3, 0, 0, 9]))), _x(1, 10, 16)),
    # cumulative sums
    "cumsum_channels": (_fn(lambda s, x: torch.cumsum(x, dim=1)), _x(1, 8, 6, 6)),
    "cumsum_2d": (_fn(lambda s, x: torch.cumsum(x, dim=-1)), _x(2, 24)),
}
