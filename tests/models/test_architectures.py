"""The architecture models (kiln.models.ARCHITECTURES): each builds, runs, is deterministic,
exports, has the structure of its published architecture and uses the idioms it was
written to exercise.

Shapes, norm-layer counts and the idioms below are worked out by hand from the
architectures (the papers' tables, the reduced widths each model file states); parameter
counts are published figures (torchvision's num_params of the full-size networks, built
from the same classes), never a formula restating a model file's widths.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kiln import models
from tests.models.helpers import assert_builds_identically, n_params, run

NAMES = [
    "mobilenet_v3_small",
    "efficientnet_b0",
    "resnet18",
    "shufflenet_v2",
    "squeezenet",
    "inception",
    "vit_tiny",
    "kwt",
    "tc_resnet8",
    "kws_gru",
    "kws_lstm",
    "unet_tiny",
    "yolo_tiny",
]

INPUT_SHAPES = {
    "mobilenet_v3_small": (1, 3, 64, 64),
    "efficientnet_b0": (1, 3, 64, 64),
    "resnet18": (1, 3, 64, 64),
    "shufflenet_v2": (1, 3, 64, 64),
    "squeezenet": (1, 3, 50, 50),
    "inception": (1, 3, 32, 32),
    "vit_tiny": (1, 3, 32, 32),
    "kwt": (1, 49, 10),
    "tc_resnet8": (1, 10, 49),
    "kws_gru": (1, 16, 10),
    "kws_lstm": (1, 16, 10),
    "unet_tiny": (1, 3, 32, 32),
    "yolo_tiny": (1, 3, 64, 64),
}

# 10 image classes, 12 keywords; U-Net: 2 class maps at the input's size; YOLO: 3 anchors x
# (8x8 + 4x4) cells = 240 boxes of x, y, w, h, objectness and 3 class scores.
OUTPUT_SHAPES = {
    **{name: (1, 10) for name in NAMES[:7]},
    **{name: (1, 12) for name in ("kwt", "tc_resnet8", "kws_gru", "kws_lstm")},
    "unet_tiny": (1, 2, 32, 32),
    "yolo_tiny": (1, 240, 8),
}

# BatchNorm layers, counted from each model file's description:
#   mobilenet_v3_small: stem 1; bottlenecks without expansion conv 2, with 3 (4 of them); last conv 1 = 16
#   efficientnet_b0: stem 1; first MBConv (ratio 1) 2, the four others (with expansion) 3 each; head 1 = 16
#   resnet18: stem 1 + 8 blocks x 2 + 3 downsampling shortcuts = 20
#   shufflenet_v2: stem 1; stride-2 units 5 (branch1 2, branch2 3) x 3; stride-1 units 3 x 3; conv5 1 = 26
#   inception: stem 1 + 2 modules x 6 convolutions = 13
#   tc_resnet8: 3 blocks x 3 (two convs, the shortcut) = 9
#   unet_tiny: 5 double convolutions x 2 = 10
#   yolo_tiny: 4 strided Convs; 2 C2f x (2 + 2 in the bottleneck); SPPF 2; neck 1 = 15
BATCHNORM_LAYERS = {
    "mobilenet_v3_small": 16,
    "efficientnet_b0": 16,
    "resnet18": 20,
    "shufflenet_v2": 26,
    "squeezenet": 0,
    "inception": 13,
    "vit_tiny": 0,
    "kwt": 0,
    "tc_resnet8": 9,
    "kws_gru": 0,
    "kws_lstm": 0,
    "unet_tiny": 10,
    "yolo_tiny": 15,
}

# vit_tiny: 2 blocks x 2 + the final one; kwt: 2 blocks x 2.
LAYERNORM_LAYERS = {"vit_tiny": 5, "kwt": 4}

# The idioms each model was written to exercise, as torch.export captures them (before
# kiln's frontend rewrites anything): in-place activations and adds, dropout, chunk, the
# channel shuffle's transpose, attention's pieces, 1-D convolution, recurrent layers...
IDIOMS = {
    "mobilenet_v3_small": {
        "hardswish_.default",
        "hardsigmoid_.default",
        "relu_.default",
        "add_.Tensor",
        "dropout_.default",
        "adaptive_avg_pool2d.default",
        "mul.Tensor",
    },
    "efficientnet_b0": {"silu_.default", "silu.default", "sigmoid.default", "add_.Tensor", "dropout_.default"},
    "resnet18": {"add_.Tensor", "relu_.default", "max_pool2d.default"},
    "shufflenet_v2": {
        "chunk.default",
        "transpose.int",
        "view.default",
        "contiguous.default",
        "cat.default",
        "mean.dim",
    },
    "squeezenet": {"max_pool2d.default", "cat.default", "relu_.default", "dropout.default"},
    "inception": {"max_pool2d.default", "cat.default", "relu_.default", "dropout.default"},
    "vit_tiny": {
        "layer_norm.default",
        "gelu.default",
        "softmax.int",
        "matmul.default",
        "unbind.int",
        "cat.default",
        "expand.default",
        "add.Tensor",
        "select.int",
    },
    "kwt": {"layer_norm.default", "gelu.default", "softmax.int", "bmm.default", "dropout.default", "cat.default"},
    "tc_resnet8": {"conv1d.default", "batch_norm.default", "add_.Tensor", "adaptive_avg_pool1d.default"},
    "kws_gru": {"gru.input"},
    "kws_lstm": {"lstm.input"},
    "unet_tiny": {"conv_transpose2d.input", "upsample_bilinear2d.vec", "cat.default", "max_pool2d.default"},
    "yolo_tiny": {
        "silu_.default",
        "upsample_nearest2d.vec",
        "cat.default",
        "sigmoid.default",
        "split_with_sizes.default",
        "permute.default",
        "pow.Tensor_Scalar",
        "chunk.default",
        "max_pool2d.default",
    },
}


# ---------------------------------------------------------------- registry


def test_registry_lists_the_architectures_in_order_apart_from_the_zoo():
    assert list(models.ARCHITECTURES) == NAMES
    assert not set(models.ARCHITECTURES) & set(models.MODELS)
    for name, entry in models.ARCHITECTURES.items():
        assert isinstance(entry, models.ZooEntry) and entry.name == name and entry.summary
        # Only these declare wider tolerances; models/kiln/models/__init__.py says why.
        wider = {"resnet18": 4, "mobilenet_v3_small": 3, "kws_lstm": 4}
        assert (entry.tolerance_steps, entry.tolerance_fraction) == (wider.get(name, 2), 1.0)
        assert models.find(name) is entry
    assert models.find("resnet8") is models.MODELS["resnet8"]
    assert models.find("resnet9000") is None


def test_kiln_compile_finds_an_architecture_by_name():
    from kiln.frontend.export import load_model

    loaded = load_model("squeezenet")
    assert loaded.name == "squeezenet" and tuple(loaded.inputs[0].shape) == (1, 3, 50, 50)
    assert not loaded.module.training


# ---------------------------------------------------------------- every model


@pytest.mark.parametrize("name", NAMES)
def test_builds_and_runs(name):
    model, inputs = models.load(name)
    assert not any(m.training for m in model.modules()), "not in eval mode"
    assert len(inputs) == 1 and inputs[0].dtype == torch.float32
    assert tuple(inputs[0].shape) == INPUT_SHAPES[name]
    output = run(model, inputs)
    assert tuple(output.shape) == OUTPUT_SHAPES[name]
    assert torch.isfinite(output).all()
    assert output.min() < output.max(), "all outputs equal"


@pytest.mark.parametrize("name", NAMES)
def test_building_twice_gives_identical_models(name):
    assert_builds_identically(name)


@pytest.mark.parametrize("name", NAMES)
def test_norm_layers_are_not_identity(name):
    model, _ = models.load(name)
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(norms) == BATCHNORM_LAYERS[name]
    for bn in norms:
        assert (bn.running_var > 0).all()
        assert not torch.equal(bn.running_var, torch.ones_like(bn.running_var))
        assert not torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))
        assert not torch.equal(bn.weight, torch.ones_like(bn.weight))
    layer_norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert len(layer_norms) == LAYERNORM_LAYERS.get(name, 0)
    for ln in layer_norms:
        assert not torch.equal(ln.weight, torch.ones_like(ln.weight))
        assert not torch.equal(ln.bias, torch.zeros_like(ln.bias))


@pytest.mark.parametrize("name", NAMES)
def test_exports_and_uses_its_idioms(name):
    model, inputs = models.load(name)
    program = torch.export.export(model, inputs, strict=False)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(*inputs), run(model, inputs))
    ops = {str(n.target).removeprefix("aten.") for n in program.graph.nodes if n.op == "call_function"}
    assert IDIOMS[name] <= ops, sorted(IDIOMS[name] - ops)


def test_model_files_define_aot_arm_compiler_names():
    import importlib

    for module_name in {entry.build.args[0] for entry in models.ARCHITECTURES.values()}:
        module = importlib.import_module(f"kiln.models.{module_name}")
        assert isinstance(module.ModelUnderTest, nn.Module) and not module.ModelUnderTest.training
        assert isinstance(module.ModelInputs, tuple) and callable(module.build)


# ---------------------------------------------------------------- published sizes
# The full-size networks, built from the same classes, against torchvision's published
# num_params: the block structure is the real one.


def test_resnet18_at_full_width_has_torchvisions_parameter_count():
    from kiln.models.resnet18 import ResNet18

    assert n_params(ResNet18((64, 128, 256, 512), 1000)) == 11_689_512


def test_shufflenet_v2_x05_at_full_depth_has_torchvisions_parameter_count():
    from kiln.models.shufflenet_v2 import ShuffleNetV2

    assert n_params(ShuffleNetV2((48, 96, 192), (4, 8, 4), 1024, 1000)) == 1_366_792


def test_squeezenet_1_1_at_full_width_has_torchvisions_parameter_count():
    from kiln.models.squeezenet import SqueezeNet

    fires = ((16, 64, 64),) * 2 + ((32, 128, 128),) * 2 + ((48, 192, 192),) * 2 + ((64, 256, 256),) * 2
    assert n_params(SqueezeNet(64, fires, 1000)) == 1_235_496


# ---------------------------------------------------------------- structure


def test_squeezenet_pools_in_ceil_mode():
    # 50 -> stem 3x3/2: 24; each 3x3/2 pool in ceil mode: 12, 6, 3 (floor mode: 11, 5, 2).
    model, inputs = models.load("squeezenet")
    sizes = []
    for module in model.modules():
        if isinstance(module, nn.MaxPool2d):
            module.register_forward_hook(lambda m, i, o: sizes.append((i[0].shape[-1], o.shape[-1])))
    run(model, inputs)
    assert sizes == [(24, 12), (12, 6), (6, 3)]


def test_shufflenet_channel_shuffle_interleaves_the_two_halves():
    from kiln.models.shufflenet_v2 import channel_shuffle

    x = torch.arange(8.0).view(1, 8, 1, 1)
    # groups of 4: [0 1 2 3 | 4 5 6 7] -> 0 4 1 5 2 6 3 7
    assert channel_shuffle(x, 2).flatten().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_yolo_tiny_decodes_boxes_into_their_cells():
    """Row r of level l (stride s, n x n cells) is anchor r // n^2 at cell (r % n^2) // n, r % n.
    YOLOv5's decoding puts the box centre within (-0.5, 1.5) cells of that cell's corner, its
    size within (0, 4) anchors, and the scores in (0, 1)."""
    model, inputs = models.load("yolo_tiny")
    boxes = run(model, inputs)[0]
    anchors = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)))
    first = 0
    for stride, n, level_anchors in ((8, 8, anchors[0]), (16, 4, anchors[1])):
        for r in range(3 * n * n):
            anchor, cell = divmod(r, n * n)
            gy, gx = divmod(cell, n)
            x, y, w, h = boxes[first + r, :4].tolist()
            assert (gx - 0.5) * stride < x < (gx + 1.5) * stride
            assert (gy - 0.5) * stride < y < (gy + 1.5) * stride
            aw, ah = level_anchors[anchor]
            assert 0 < w < 4 * aw and 0 < h < 4 * ah
        first += 3 * n * n
    assert ((boxes[:, 4:] > 0) & (boxes[:, 4:] < 1)).all()


def test_efficientnet_stochastic_depth_drops_whole_samples_only_in_training():
    from kiln.models.efficientnet_b0 import StochasticDepth

    layer = StochasticDepth(0.5)
    x = torch.ones(64, 3, 2, 2)
    assert layer.eval()(x) is x
    torch.manual_seed(0)
    y = layer.train()(x)
    per_sample = y.flatten(1)
    # every sample either dropped (0) or kept and scaled by 1 / (1 - 0.5) = 2, as a whole
    assert ((per_sample == 0).all(1) | (per_sample == 2).all(1)).all()
    assert 0 < int((per_sample == 0).all(1).sum()) < 64


def test_the_transformers_add_a_learned_positional_embedding():
    for name, attribute, shape in (("vit_tiny", "pos_embed", (1, 17, 32)), ("kwt", "positions", (1, 50, 32))):
        model, _ = models.load(name)
        positions = getattr(model, attribute)
        assert isinstance(positions, nn.Parameter) and tuple(positions.shape) == shape
