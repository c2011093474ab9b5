"""Each operator kiln lowers: TOSA on tosa_reference_model vs the PT2E reference,
and Vela accepts the graph for U55 and U85."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from kiln import boards, families
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.lower.lowerer import conv_geometry, reduced_permutation, scale_to_multiplier
from kiln.lower.resize import aligned_taps, bilinear_taps
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec
from tests.compiler.helpers import Lambda, compare_steps, conv, lower_module, quantize_input, run_tosa, seeded

F = nn.functional


class Constants(nn.Module):
    """fn(self, *xs) on tensor attributes of the module (a bias, a scale, a positional
    embedding, a matrix), seeded parameters of the shapes given by name."""

    def __init__(self, fn, **shapes):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        for name, shape in shapes.items():
            setattr(self, name, nn.Parameter(torch.randn(*shape, generator=g)))
        self.fn = fn

    def forward(self, *xs):
        return self.fn(self, *xs)


def batch_norm_1d(channels: int) -> nn.BatchNorm1d:
    """An eval-mode BatchNorm1d with seeded statistics and affine parameters."""
    bn = nn.BatchNorm1d(channels).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        bn.running_mean.copy_(0.3 * torch.randn(channels, generator=g))
        bn.running_var.copy_(torch.rand(channels, generator=g) + 0.5)
        bn.weight.copy_(torch.rand(channels, generator=g) + 0.5)
        bn.bias.copy_(0.2 * torch.randn(channels, generator=g))
    return bn


CASES = {
    "conv_stride2_pad1": (Lambda(lambda m, x: m[0](x), conv(3, 8, 3, stride=2, padding=1)), [(1, 3, 15, 15)]),
    "conv_dilation2": (Lambda(lambda m, x: m[0](x), conv(4, 8, 3, dilation=2, padding=2)), [(1, 4, 12, 12)]),
    "conv_grouped": (Lambda(lambda m, x: m[0](x), conv(4, 8, 3, groups=2, padding=1)), [(1, 4, 8, 8)]),
    "depthwise_multiplier2": (Lambda(lambda m, x: m[0](x), conv(4, 8, 3, groups=4, padding=1)), [(1, 4, 9, 9)]),
    "conv_relu6": (Lambda(lambda m, x: F.relu6(m[0](x)), conv(3, 6, 1)), [(1, 3, 6, 6)]),
    "conv_5x5_stride3": (Lambda(lambda m, x: m[0](x), conv(2, 4, 5, stride=3)), [(1, 2, 17, 16)]),
    # strides beyond the NPU's 1..3: space to depth, then a stride-1 convolution (ViT's patch embedding)
    "conv_patch_stride8": (Lambda(lambda m, x: m[0](x), conv(3, 16, 8, stride=8)), [(1, 3, 32, 32)]),
    "conv_5x5_stride4_pad2": (Lambda(lambda m, x: m[0](x), conv(4, 8, 5, stride=4, padding=2)), [(1, 4, 19, 18)]),
    "conv1d_stride4": (Lambda(lambda m, x: m[0](x), nn.Conv1d(8, 6, 4, stride=4)), [(1, 8, 64)]),
    # a Conv1d residual block: its rank-3 values stay channels last between the convolutions
    "conv1d_residual": (
        Lambda(
            lambda m, x: F.relu(m[1](F.relu(m[0](x))) + m[2](x)),
            nn.Conv1d(6, 8, 5, padding=2),
            nn.Conv1d(8, 8, 3, padding=1),
            nn.Conv1d(6, 8, 1),
        ),
        [(1, 6, 20)],
    ),
    "depthwise_6x6_stride4_pad1": (
        Lambda(lambda m, x: m[0](x), conv(4, 8, 6, stride=4, padding=1, groups=4)),
        [(1, 4, 17, 16)],
    ),
    "linear": (Lambda(lambda m, x: m[0](x), nn.Linear(20, 7)), [(2, 20)]),
    "linear_3d_relu": (Lambda(lambda m, x: F.relu(m[0](x)), nn.Linear(12, 5)), [(1, 3, 12)]),
    "matmul": (Lambda(lambda m, a, b: torch.matmul(a, b)), [(1, 4, 6), (1, 6, 5)]),
    "bmm": (Lambda(lambda m, a, b: torch.bmm(a, b)), [(2, 3, 8), (2, 8, 4)]),
    "max_pool_ceil": (Lambda(lambda m, x: F.max_pool2d(x, 3, 2, ceil_mode=True)), [(1, 4, 10, 10)]),
    "max_pool_pad": (Lambda(lambda m, x: F.max_pool2d(x, 3, 2, padding=1)), [(1, 4, 9, 9)]),
    "avg_pool_pad": (Lambda(lambda m, x: F.avg_pool2d(x, 3, 1, padding=1)), [(1, 4, 6, 6)]),
    "avg_pool_2x2": (Lambda(lambda m, x: F.avg_pool2d(x, 2)), [(1, 8, 8, 8)]),
    "avg_pool_floors": (Lambda(lambda m, x: F.avg_pool2d(x, 2)), [(1, 4, 7, 7)]),
    "global_avg_pool": (Lambda(lambda m, x: F.adaptive_avg_pool2d(x, 1)), [(1, 16, 7, 5)]),
    "adaptive_avg_pool_2x2": (Lambda(lambda m, x: F.adaptive_avg_pool2d(x, 2)), [(1, 4, 8, 6)]),
    # pools with strides beyond 1..3: reductions over separate windows
    "avg_pool_stride4": (Lambda(lambda m, x: F.avg_pool2d(x, 4)), [(1, 4, 16, 12)]),
    "avg_pool_4x2": (Lambda(lambda m, x: F.avg_pool2d(x, (4, 2))), [(1, 4, 12, 10)]),
    "max_pool_5x5_floors": (Lambda(lambda m, x: F.max_pool2d(x, 5)), [(1, 4, 17, 13)]),
    "max_pool_3x3_stride4_pad1": (Lambda(lambda m, x: F.max_pool2d(x, 3, 4, padding=1)), [(1, 3, 13, 14)]),
    "adaptive_avg_pool_8x1": (Lambda(lambda m, x: F.adaptive_avg_pool2d(x, (4, 1))), [(1, 3, 32, 8)]),
    "mean_hw": (Lambda(lambda m, x: x.mean(dim=(2, 3))), [(1, 8, 5, 5)]),
    # reductions over any dims: merged runs of adjacent dims, a chain of one-axis REDUCEs
    "sum_last_2d": (Lambda(lambda m, x: x.sum(-1)), [(4, 10)]),
    "sum_channels_and_width_keepdim": (Lambda(lambda m, x: x.sum((1, 3), keepdim=True)), [(1, 6, 4, 5)]),
    "sum_all_to_scalar": (Lambda(lambda m, x: x.sum()), [(2, 3, 5)]),
    "mean_last_centred": (Lambda(lambda m, x: x - x.mean(-1, keepdim=True)), [(1, 5, 12)]),  # layer norm's
    "mean_dims_0_2": (Lambda(lambda m, x: x.mean((0, 2))), [(3, 4, 5)]),
    "mean_channels_keepdim": (Lambda(lambda m, x: x.mean(1, keepdim=True)), [(1, 8, 3, 4)]),
    "mean_chw_batch2": (Lambda(lambda m, x: x.mean((-3, -2, -1))), [(2, 4, 3, 3)]),
    "amax_last": (Lambda(lambda m, x: x.amax(-1)), [(4, 10)]),  # through a transpose
    "amax_two_dims_keepdim": (Lambda(lambda m, x: x.amax((1, 3), keepdim=True)), [(1, 6, 4, 5)]),
    "amax_all": (Lambda(lambda m, x: x.amax((0, 1, 2))), [(2, 3, 40)]),  # 240 values as 16 x 15
    "amin_last_keepdim": (Lambda(lambda m, x: x.amin(-1, keepdim=True)), [(2, 3, 10)]),
    "amin_first": (Lambda(lambda m, x: x.amin(0)), [(5, 7)]),
    "amin_hw": (Lambda(lambda m, x: torch.minimum(x.amin((2, 3)), x.mean((2, 3)))), [(1, 4, 6, 6)]),
    "add_broadcast": (Lambda(lambda m, a, b: a + b), [(1, 4, 5, 5), (1, 4, 1, 5)]),
    "sub": (Lambda(lambda m, a, b: F.relu(a - b)), [(1, 3, 4, 4), (1, 3, 4, 4)]),
    "mul": (Lambda(lambda m, a, b: a * b), [(1, 6, 3, 3), (1, 6, 3, 3)]),
    "hardtanh_clamp": (Lambda(lambda m, x: torch.clamp(F.hardtanh(x * 1.5), -0.5, 2.0)), [(1, 2, 4, 4)]),
    "sigmoid": (Lambda(lambda m, x: torch.sigmoid(x)), [(1, 3, 4, 4)]),
    "tanh": (Lambda(lambda m, x: torch.tanh(x)), [(1, 10)]),
    "hardswish": (Lambda(lambda m, x: F.hardswish(x)), [(1, 3, 4, 4)]),
    "leaky_relu": (Lambda(lambda m, x: F.leaky_relu(x, 0.1)), [(1, 3, 4, 4)]),
    "cat_channels": (Lambda(lambda m, a, b: torch.cat([a, b], 1)), [(1, 2, 4, 4), (1, 3, 4, 4)]),
    # a learned class token before the tokens (ViT): one CONCAT operand is a constant
    "cat_constant_token": (
        Lambda(lambda m, x: torch.cat([m[0].weight.reshape(1, 1, 6), x], 1), nn.Linear(6, 1)),
        [(1, 5, 6)],
    ),
    "cat_constant_map": (
        Lambda(lambda m, x: torch.cat([x, m[0].weight.reshape(1, 2, 2, 2)], 1), nn.Linear(2, 4)),
        [(1, 3, 2, 2)],
    ),
    "flatten_nchw": (Lambda(lambda m, x: torch.flatten(x, 1)), [(1, 3, 4, 5)]),
    "permute": (Lambda(lambda m, x: x.permute(0, 2, 3, 1)), [(1, 3, 4, 5)]),
    # attention's q, k, v apart: [B, T, 3, heads, d] -> [3, B, heads, T, d]
    "permute_qkv": (Lambda(lambda m, x: x.reshape(1, 5, 3, 2, 4).permute(2, 0, 3, 1, 4) * 1.5), [(1, 5, 24)]),
    "permute_batched_nhwc": (Lambda(lambda m, x: x.permute(0, 2, 3, 1) + 0.5), [(2, 3, 4, 5)]),
    "view_squeeze_unsqueeze": (Lambda(lambda m, x: x.view(1, 4, 6).unsqueeze(1).squeeze(1)), [(1, 2, 3, 4)]),
    "pad": (Lambda(lambda m, x: F.pad(x, (1, 2, 0, 1))), [(1, 3, 4, 4)]),
    "upsample_nearest": (Lambda(lambda m, x: F.interpolate(x, scale_factor=2, mode="nearest")), [(1, 3, 4, 5)]),
    "upsample_nearest_x4": (Lambda(lambda m, x: F.interpolate(x, scale_factor=4, mode="nearest")), [(1, 2, 3, 2)]),
    "upsample_nearest_3x2": (Lambda(lambda m, x: F.interpolate(x, size=(9, 4), mode="nearest")), [(1, 2, 3, 2)]),
    "upsample_bilinear_x2": (Lambda(lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear")), [(1, 3, 5, 6)]),
    "upsample_bilinear_3x1": (Lambda(lambda m, x: F.interpolate(x, size=(12, 5), mode="bilinear")), [(1, 2, 4, 5)]),
    "upsample_bilinear_x4": (Lambda(lambda m, x: F.interpolate(x, scale_factor=4, mode="bilinear")), [(1, 2, 3, 3)]),
    # align_corners=True: separable integer taps in units of 1/(side - 1), two 1x1 convolutions
    "upsample_bilinear_aligned": (
        Lambda(lambda m, x: F.interpolate(x, size=(12, 10), mode="bilinear", align_corners=True)),
        [(1, 3, 6, 5)],
    ),
    "resize_bilinear_aligned_down": (
        Lambda(lambda m, x: F.interpolate(x, size=(3, 5), mode="bilinear", align_corners=True)),
        [(1, 2, 8, 8)],
    ),
    "softmax_last": (Lambda(lambda m, x: torch.softmax(x * 2, -1)), [(2, 10)]),
    "softmax_channels": (Lambda(lambda m, x: torch.softmax(x, 1)), [(1, 6, 3, 4)]),
    "log_softmax": (Lambda(lambda m, x: torch.log_softmax(x, -1)), [(1, 12)]),
    "conv_transpose": (
        Lambda(lambda m, x: m[0](x), nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)),
        [(1, 4, 5, 5)],
    ),
    # a constant operand (a parameter) is a TOSA constant with its own scale and zero point
    "add_constant_bias": (Constants(lambda m, x: x + m.bias, bias=(1, 4, 1, 1)), [(1, 4, 5, 5)]),
    "add_positional_embedding": (Constants(lambda m, x: x + m.pos, pos=(1, 6, 8)), [(1, 6, 8)]),
    "sub_constant_both_orders": (Constants(lambda m, x: m.c - (x - m.row), c=(1, 6, 8), row=(6, 1)), [(1, 6, 8)]),
    "mul_constant_broadcast": (Constants(lambda m, x: x * m.scale, scale=(1, 4, 1, 1)), [(1, 4, 3, 3)]),
    "min_max_constant": (
        Constants(lambda m, x: torch.maximum(m.low, torch.minimum(x, m.high)), low=(1, 3, 1, 4), high=(3, 4, 1)),
        [(1, 3, 4, 4)],
    ),
    # x @ W, W @ x and mm with W a parameter (not nn.Linear)
    "matmul_constant": (Constants(lambda m, x: m.v @ (x @ m.w), w=(8, 5), v=(4, 6)), [(2, 6, 8)]),
    "mm_constant": (Constants(lambda m, x: torch.mm(x, m.w), w=(8, 5)), [(6, 8)]),
    # a scalar is a one-element constant; 1.0 - x is normalised to a sub from a constant
    "scalar_add_sub": (Lambda(lambda m, x: 1.0 - ((x + 1.0) - 0.5) + -2.0), [(1, 3, 4, 4)]),
    # a mean over H, W whose input feeds another op too (squeeze-excitation): a depthwise sum
    "mean_hw_shared": (Lambda(lambda m, x: x * x.mean((2, 3), keepdim=True)), [(1, 4, 6, 5)]),
    "adaptive_pool_shared": (Lambda(lambda m, x: x + F.adaptive_avg_pool2d(x, 1)), [(1, 4, 6, 5)]),
    # strided slices: every s-th entry, the last group padded where the input ends first
    "slice_step2": (Lambda(lambda m, x: x[:, ::2] + x[:, 1::2]), [(1, 6, 8)]),
    "slice_step_hw": (Lambda(lambda m, x: x[:, :, 1::3, ::2]), [(1, 3, 8, 7)]),
    "scalar_mul": (Lambda(lambda m, x: (x * 2.5) * -0.5 + x * 0), [(1, 6, 8)]),
    # a batch norm of rows (LeViT's BN_Linear head on a batch; tokens as rows): the rows of one image
    "batch_norm_rows": (Lambda(lambda m, x: m[0](x), batch_norm_1d(8)), [(5, 8)]),
    "batch_norm_1d_batch": (Lambda(lambda m, x: m[0](x), batch_norm_1d(6)), [(3, 6, 8)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_pt2e_within_one_step(name):
    module, shapes = CASES[name]
    torch.manual_seed(1)
    inputs = seeded(2, *shapes)
    calibration = [inputs, seeded(3, *shapes)]
    diffs, tosa = compare_steps(module, inputs, calibration)
    for d in diffs:
        assert d.max() <= 1, f"{name}: up to {d.max()} steps off"
    for target in ("ethos-u55-128", "ethos-u85-256"):
        compile_for(tosa, name, target)


INT16_CASES = [
    "conv_stride2_pad1",
    "depthwise_multiplier2",
    "conv_grouped",
    "linear",
    "avg_pool_pad",
    "max_pool_ceil",
    "global_avg_pool",
    "mean_hw",
    "add_broadcast",
    "mul",
    "hardtanh_clamp",
    "cat_channels",
    "pad",
    "upsample_bilinear_x2",
    "matmul",
    "conv_transpose",
    "add_constant_bias",
    "scalar_add_sub",
    "scalar_mul",
]
U85_ONLY_INT16 = {
    "matmul": "16-bit aten.matmul: Ethos-U55 and U65 have no 16-bit matrix multiply (Ethos-U85 has)",
    "conv_transpose": "16-bit conv_transpose2d: Vela cannot place a 16-bit transpose convolution on "
    "Ethos-U55 or U65 (it can on Ethos-U85)",
}
AMIN16 = "16-bit amin: on Ethos-U55 and U65 Vela 5.2.0's REDUCE_MIN gives wrong results"
U85_ONLY_INT16.update(amin_last_keepdim=AMIN16, amin_first=AMIN16, amin_hw=AMIN16)
INT16_CASES += ["sum_channels_and_width_keepdim", "mean_last_centred", "amax_two_dims_keepdim"]  # reductions
INT16_CASES += ["amin_last_keepdim", "amin_first", "amin_hw"]
INT16_CASES += ["conv_patch_stride8", "avg_pool_stride4"]  # strides beyond 1..3
INT16_CASES += ["sigmoid", "tanh", "hardswish", "mean_hw_shared"]  # interpolated 16-bit tables (kiln.partition.tables)


@pytest.mark.parametrize("name", INT16_CASES)
def test_int16_op_matches_pt2e_within_one_step(name):
    """int16 activations (int8 weights, int48 accumulators): within one step of PT2E, and
    Vela accepts the graph for every target the support rules allow; where they keep it
    off Ethos-U55, the rule's text is the reason."""
    module, shapes = CASES[name]
    torch.manual_seed(1)
    inputs = seeded(2, *shapes)
    calibration = [inputs, seeded(3, *shapes)]
    targets = ["ethos-u85-256"] if name in U85_ONLY_INT16 else ["ethos-u55-128", "ethos-u85-256"]
    diffs, tosa = compare_steps(module, inputs, calibration, target=targets[0], bits=16)
    for d in diffs:
        assert d.max() <= 1, f"{name}: up to {d.max()} steps off"
    for target in targets:
        compile_for(tosa, name, target)
    if name in U85_ONLY_INT16:
        _, _, parts = lower_module(module, inputs, calibration, "ethos-u55-128", bits=16)
        reasons = {p.reason for p in parts.placements if p.partition is None}
        assert any(r.startswith(U85_ONLY_INT16[name]) for r in reasons), reasons


# Lowered otherwise on Ethos-U85, where Vela uses hardware the U55 lacks or runs another graph faster
# (the rows of kiln.families):
# name -> (module, input shapes, steps from PT2E allowed).
U85_LOWERINGS = {
    "upsample_nearest_3x": (Lambda(lambda m, x: F.interpolate(x, scale_factor=3, mode="nearest")), [(1, 3, 4, 5)], 0),
    "upsample_nearest_5x2": (Lambda(lambda m, x: F.interpolate(x, size=(15, 4), mode="nearest")), [(1, 2, 3, 2)], 0),
    "upsample_nearest_3x2": (*CASES["upsample_nearest_3x2"], 0),
    "global_avg_pool": (*CASES["global_avg_pool"], 1),
    "mean_hw": (*CASES["mean_hw"], 1),
    "permute": (*CASES["permute"], 0),
    "permute_batched_nhwc": (*CASES["permute_batched_nhwc"], 1),
    # bilinear to any size (one RESIZE of int32 sums): PyTorch's float weights may round a tie apart
    "resize_bilinear_1_5x": (Lambda(lambda m, x: F.interpolate(x, size=(9, 9), mode="bilinear")), [(1, 4, 6, 6)], 1),
    "resize_bilinear_down": (Lambda(lambda m, x: F.interpolate(x, size=(7, 5), mode="bilinear")), [(1, 4, 12, 12)], 1),
    "upsample_bilinear_6x": (Lambda(lambda m, x: F.interpolate(x, scale_factor=6, mode="bilinear")), [(1, 2, 4, 4)], 1),
    "upsample_bilinear_2x": (*CASES["upsample_bilinear_x2"], 1),  # whole factors too: one RESIZE on the U85
    "upsample_bilinear_aligned": (*CASES["upsample_bilinear_aligned"], 1),  # align_corners: the two convolutions
    # an 8-bit requantization as RESCALE, MUL by 1, RESCALE (one rounding, as the lone RESCALE)
    "requantize_by_number": (Lambda(lambda m, x: x * 2.0 - 0.25), [(1, 10, 16)], 1),
}


@pytest.mark.parametrize("name", list(U85_LOWERINGS))
def test_u85_lowering_matches_pt2e_and_vela_places_it(name):
    module, shapes, steps = U85_LOWERINGS[name]
    inputs = seeded(2, *shapes)
    diffs, tosa = compare_steps(module, inputs, [inputs, seeded(3, *shapes)], target="ethos-u85-256")
    for d in diffs:
        assert d.max() <= steps, f"{name}: up to {d.max()} steps off"
    compile_for(tosa, name, "ethos-u85-256")


def _folded_forms(m, x):
    """Forms Vela folds into fewer passes (kiln.lower.tosa), all from one requantization so that
    they are one partition: an 8-bit requantization as RESCALE, MUL by 1, RESCALE (then a
    table); a scalar added as a one-element constant of scale |c| (c above and below the step,
    and c - y); strided slices as one copy of rows; a slice of a slice as one; pads in PyTorch's
    order (constant and reflect); cumsum and y @ W as a linear."""
    h = x * 1.5
    y = h.reshape(1, 12, 16)
    return (
        torch.sin(h * 2),
        h[:, 2:] * 3,
        y + 1.5,
        y - 0.001,
        1.0 - y,
        y[..., ::2],
        y[..., 1::3],
        h[:, :, ::2],
        h[:, 1:3, 2:5],
        F.pad(h, [1, 1, 2, 2]),
        F.pad(h, [1, 2, 2, 1], mode="reflect"),
        torch.cumsum(y, -1),
        y @ m.w,
    )


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
def test_folded_forms_match_pt2e_and_run_on_the_npu_model_as_tosa_reference_model(target):
    """Within a step of PT2E, and kiln's NPU model runs Vela's command stream (its folded
    scalings) to tosa_reference_model's bytes for every output."""
    module = Constants(_folded_forms, w=(16, 12))
    inputs = seeded(2, (1, 4, 6, 8))
    calibration = [inputs, seeded(3, (1, 4, 6, 8))]
    diffs, tosa = compare_steps(module, inputs, calibration, target=target)
    assert max(int(d.max()) for d in diffs) <= 1
    _, g, parts = lower_module(module, inputs, calibration, target)
    spec = CompileSpec(target).resolved()
    result = vela.compile_tosa(tosa, "folded", target, spec.system_config, spec.memory_mode)
    feeds = [quantize_input(inputs[0], g.inputs[0].qparams)]
    raw, run = run_compiled(result, feeds, config_for(target))
    assert run.fault is None
    expected = [np.ascontiguousarray(e).tobytes() for e in run_tosa(tosa, feeds)]
    wrong = [i for i, (got, want) in enumerate(zip(raw, expected)) if got != want]
    assert len(raw) == len(expected) == 13 and not wrong, wrong


def test_bilinear_to_any_size_runs_on_the_u85_model_as_tosa_reference_model_and_stays_off_the_u55():
    """kiln's U85 model runs Vela's RESIZE to tosa_reference_model's bytes; on Ethos-U55 a factor
    of 1.5 stays on the CPU with the rule's reason."""
    module, shapes, _ = U85_LOWERINGS["resize_bilinear_1_5x"]
    inputs = seeded(2, *shapes)
    calibration = [inputs, seeded(3, *shapes)]
    _, g, parts = lower_module(module, inputs, calibration, "ethos-u85-256")
    tosa = tosa_lowering.lower(parts.partitions[0], boards.target("ethos-u85-256").npu)
    result = vela.compile_tosa(tosa, "resize", "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only")
    feeds = [quantize_input(inputs[0], g.inputs[0].qparams)]
    raw, run = run_compiled(result, feeds, config_for("ethos-u85-256"))
    assert run.fault is None and raw[0] == np.ascontiguousarray(run_tosa(tosa, feeds)[0]).tobytes()
    _, _, parts = lower_module(module, inputs, calibration, "ethos-u55-128")
    reasons = {p.reason for p in parts.placements if p.partition is None}
    assert (
        "bilinear upsampling from [1, 4, 6, 6] to [1, 4, 9, 9]: kiln lowers whole scale factors up to 5 without "
        "align_corners, and int8 align_corners=True to sizes up to 128 a side (on Ethos-U85 also any size)" in reasons
    ), reasons


def compile_for(tosa: bytes, name: str, target: str):
    family = target.rsplit("-", 1)[0]
    config = "Ethos_U55_High_End_Embedded" if family == "ethos-u55" else "Ethos_U85_SYS_DRAM_Mid"
    mode = "Shared_Sram" if family == "ethos-u55" else "Dedicated_Sram_384KB"
    result = vela.compile_tosa(tosa, name, target, config, mode)
    assert result.cmd_data[:4] == b"COP1"


def test_reduced_permutation_by_hand():
    assert reduced_permutation([1, 50, 1, 3, 32], [3, 1, 0, 2, 4]) == ([50, 3, 32], [1, 0, 2])
    assert reduced_permutation([1, 8, 4, 4], [0, 2, 3, 1]) == ([8, 16], [1, 0])  # NCHW -> NHWC
    assert reduced_permutation([2, 3, 4], [0, 1, 2]) == ([24], [0])
    assert reduced_permutation([2, 3, 4, 5], [3, 2, 1, 0]) == ([2, 3, 4, 5], [3, 2, 1, 0])
    assert reduced_permutation([2, 1, 3], [1, 2, 0]) == ([2, 3], [1, 0])


def test_scale_to_multiplier_by_hand():
    assert scale_to_multiplier(0.5) == (1 << 30, 31)  # 2**30 * 2**-31
    assert scale_to_multiplier(1.0) == (1 << 30, 30)
    m, s = scale_to_multiplier(0.0123)
    assert (1 << 30) <= m < (1 << 31) and abs(m * 2.0**-s - 0.0123) < 1e-11


@pytest.mark.parametrize("size, out", [(4, 8), (5, 11), (7, 3), (1, 4), (4, 1), (6, 6)])
def test_aligned_taps_are_pytorchs_align_corners_weights(size, out):
    """Each input sample's weight in each output sample, as PyTorch interpolates a basis vector."""
    basis = torch.eye(size).reshape(size, 1, 1, size)
    weights = F.interpolate(basis, size=(1, out), mode="bilinear", align_corners=True).reshape(size, out).T
    np.testing.assert_allclose(aligned_taps(size, out) / max(out - 1, 1), weights.numpy(), atol=1e-6)


def test_bilinear_taps_by_hand():
    """align_corners=False, factor 2: output 2i reads x[i-1], x[i] with 1/4, 3/4 and output
    2i+1 reads x[i], x[i+1] with 3/4, 1/4 (in quarters); factor 3: offsets -1/3, 0, +1/3."""
    np.testing.assert_array_equal(bilinear_taps(2), [[1, 3, 0], [0, 3, 1]])
    np.testing.assert_array_equal(bilinear_taps(3), [[2, 4, 0], [0, 6, 0], [0, 4, 2]])


def test_conv_geometry_trims_what_pytorch_floors():
    # 8 rows, kernel 3, stride 2, pad 1: PyTorch gives 4 rows; TOSA needs (8-1+1+p_after-2) % 2 == 0
    assert conv_geometry(8, 3, 2, 1, 1, 4) == (1, 0, 0)
    assert conv_geometry(15, 3, 2, 1, 1, 8) == (1, 1, 0)
    # 17 rows, kernel 5, stride 3, no padding: 5 outputs use 3*4+5 = 17 rows; 16 rows: crop none
    assert conv_geometry(17, 5, 3, 1, 0, 5) == (0, 0, 0)
    assert conv_geometry(16, 5, 3, 1, 0, 4) == (0, 0, 2)


PAD_MODES = ["constant", "reflect", "replicate", "circular"]


@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("shape, pads", [((1, 3, 5, 6), (1, 2, 3, 1)), ((1, 4, 7), (3, 2)), ((2, 3, 4), (0, 3))])
def test_every_pad_mode_equals_eager_pytorch(mode, shape, pads):
    """Padding copies samples (or writes the zero point): the NPU's result is eager PyTorch's
    pad of the quantized input, to the last bit, and the PT2E reference's. Zero padding in
    place of the other modes was off by up to 255 steps."""
    module = Lambda(lambda m, x: F.pad(x, pads, mode=mode))
    inputs = seeded(4, shape)
    reference, g, parts = lower_module(module, inputs)
    assert [p.reason for p in parts.placements if p.partition is None] == []
    q_in = g.inputs[0].qparams
    x_q = quantize_input(inputs[0], q_in, torch.int8)
    q_out = g.outputs[0].qparams
    x_dq = torch.from_numpy((x_q.astype(np.float32) - q_in.zero_point) * np.float32(q_in.scale))
    want = F.pad(x_dq, pads, mode=mode).numpy()
    for family in families.FAMILIES.values():  # in PyTorch's order, or channels last (CHANNELS_LAST_PAD_COPIES)
        (got,) = run_tosa(tosa_lowering.lower(parts.partitions[0], family), [x_q])
        assert got.shape == want.shape
        assert np.abs((got.astype(np.float32) - q_out.zero_point) * np.float32(q_out.scale) - want).max() <= 1e-6
    (diff,), _ = compare_steps(module, inputs)
    assert diff.max() == 0


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_padding_modes_match_pt2e_within_one_step(mode):
    """A convolution's padding_mode reaches kiln as aten.pad before the convolution."""
    module = Lambda(lambda m, x: m[0](x), conv(3, 8, 3, padding=1, padding_mode=mode))
    (diff,), _ = compare_steps(module, seeded(5, (1, 3, 9, 9)))
    assert diff.max() <= 1, f"{mode}: up to {diff.max()} steps off"


def test_16_bit_amin_stays_on_the_cpu_of_the_u55_with_its_reason():
    """kiln's amin on Ethos-U55 is ~max(~x) through two 8-bit tables (Vela's REDUCE_MIN there, reshaped
    across NHWC axes, computes the wrong result): at 16 bits the rule keeps it on the CPU and says why."""
    module, shapes = CASES["amin_last_keepdim"]
    _, _, parts = lower_module(module, seeded(2, *shapes), target="ethos-u55-128", bits=16)
    (reason,) = {p.reason for p in parts.placements if p.op.op_type == "aten.amin"}
    assert reason.startswith(AMIN16), reason


@pytest.mark.parametrize(
    "shape, dtype, zero_point, dims, fits",
    [
        ((384, 21931), "int8", -128, None, True),  # 8,421,504 values of up to 255 steps: at most 2^31 - 1
        ((385, 21931), "int8", -128, [0, 1], False),
        ((385, 21931), "int8", 0, [-1, 0], True),  # up to 128 steps each
        ((2, 65535), "int16", 0, [1], True),  # 65,535 values of up to 32,768 steps
        ((2, 32768), "int16", 0, [0, 1], False),
    ],
)
def test_a_sum_or_mean_that_could_overflow_int32_stays_on_the_cpu(shape, dtype, zero_point, dims, fits):
    from kiln import boards
    from kiln.graph import Op, QParams, Value
    from kiln.partition import support

    qmin, qmax = (-128, 127) if dtype == "int8" else (-32768, 32767)
    x = Value("x", shape, dtype, QParams(0.05, zero_point, qmin=qmin, qmax=qmax))
    for target in (torch.ops.aten.sum.dim_IntList, torch.ops.aten.mean.dim):
        op = Op(
            "reduce", target, (x, dims, False), {}, [Value("y", (1,), dtype, QParams(0.5, 0, qmin=qmin, qmax=qmax))]
        )
        reason = support.reason(op, boards.target("ethos-u55-128").npu)
        assert (reason is None) == fits, reason
        if not fits:
            assert "the NPU sums in int32" in reason, reason


@pytest.mark.parametrize("bits", [8, 16])
def test_scalar_far_beyond_the_result_stays_within_one_step(bits):
    """x near 133, minus 133: a scalar operand far beyond the tensor's step must not coarsen
    the tensor's widening (as a one-element constant of scale 133 it made the int16 result 17
    steps off; measured)."""
    x = seeded(4, (1, 3, 8, 8))[0] * 0.01 + 133.0
    (diff,), _ = compare_steps(Lambda(lambda m, x: x - 133.0), (x,), bits=bits)
    assert diff.max() <= 1, f"up to {diff.max()} steps off"


class Int32Products(nn.Module):
    """int32 products of two tensors (broadcast), of a tensor and an integer, and of a tensor
    and an int32 buffer: PyTorch wraps each modulo 2^32."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.tensor([[2**31 - 1, -(2**31), 65535, -32768, 46341, 7] * 2], dtype=torch.int32))

    def forward(self, a, b):
        return a * b, a * -98765, b * self.k, (a * b) * a


def _int32_edges(seed: int, shape) -> torch.Tensor:
    """Random int32 values with the limbs' edges (0, +-1, 2^15, 2^16 - 1, the extremes) in front."""
    edges = [0, 1, -1, 2**15 - 1, 2**15, -(2**15), 2**16 - 1, 2**16, -(2**16), 46341, 2**31 - 1, -(2**31)]
    values = torch.randint(-(2**31), 2**31, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int64)
    flat = values.reshape(-1)
    flat[: len(edges)] = torch.tensor(edges[:: 1 if seed % 2 else -1])
    return values.to(torch.int32)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
def test_int32_products_wrap_as_pytorch_on_the_npu(target):
    """Every product on the NPU; kiln run-host (tosa_reference_model) and kiln's NPU model running
    Vela's command stream both give PyTorch's wrapped products bit for bit, extremes included."""
    from kiln import compile as kc
    from kiln.frontend.export import LoadedModel
    from kiln.reference import run_host

    a, b = _int32_edges(1, (4, 12)), _int32_edges(2, (1, 12))
    module = Int32Products().eval()
    result = kc.compile_model(LoadedModel("int32_products", module, (a, b)), CompileSpec(target), log=lambda line: None)
    assert {o["op"]: o["where"] for o in result.report["ops"]} == {"aten.mul": "npu"}, result.report["ops"]
    want = [w.numpy() for w in module(a, b)]
    got = run_host.run(result.pte, [a.numpy(), b.numpy()])
    assert all(np.array_equal(g.reshape(w.shape), w) for g, w in zip(got, want))
    values = {id(v): x.numpy() for x, v in zip((a, b), result.graph.inputs)}
    for part in result.partitioning.partitions:  # in order: each takes the model's inputs or an earlier one's outputs
        index = [d.index for d in result.program.delegates].index(part.index)
        tosa, compiled = result.tosa[index], result.vela[index]
        feeds = [values[id(v)] for v in part.inputs]
        raw, run = run_compiled(compiled, feeds, config_for(target))
        expected = run_tosa(tosa, feeds)
        assert run.fault is None and raw == [np.ascontiguousarray(e).tobytes() for e in expected]
        values.update((id(v), e) for v, e in zip(part.outputs, expected))
