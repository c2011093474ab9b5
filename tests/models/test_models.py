"""The model zoo: every entry builds, runs, is deterministic and exports.

Expected shapes and layer counts below are worked out by hand from the
architectures, and parameter counts are published figures, not taken from the code under test.
"""

import importlib
import subprocess
import sys

import pytest
import torch
from torch import nn

from kiln import models
from kiln.errors import UsageError
from tests.models.helpers import n_params, run

NAMES = [
    "tiny_cnn",
    "ds_cnn",
    "resnet8",
    "mobilenet_v1_025",
    "fc_autoencoder",
    "mobilenet_v2",
    "mobilenet_v2_035",
    "digits",
]

INPUT_SHAPES = {
    "tiny_cnn": (1, 1, 8, 8),
    "ds_cnn": (1, 1, 49, 10),
    "resnet8": (1, 3, 32, 32),
    "mobilenet_v1_025": (1, 3, 96, 96),
    "fc_autoencoder": (1, 640),
    "mobilenet_v2": (1, 3, 224, 224),
    "mobilenet_v2_035": (1, 3, 96, 96),
    "digits": (1, 1, 8, 8),
}

OUTPUT_SHAPES = {
    "tiny_cnn": (1, 4),
    "ds_cnn": (1, 12),
    "resnet8": (1, 10),
    "mobilenet_v1_025": (1, 2),
    "fc_autoencoder": (1, 640),
    "mobilenet_v2": (1, 1000),
    "mobilenet_v2_035": (1, 1000),
    "digits": (1, 10),
}

# BatchNorm layers per model, counted from the architectures:
#   ds_cnn: stem 1 + 4 blocks x (depthwise, pointwise) = 9
#   resnet8: stem 1 + 3 stacks x 2 (the 1x1 shortcuts have none) = 7
#   mobilenet_v1_025: first conv 1 + 13 blocks x 2 = 27
#   fc_autoencoder: every linear layer but the last: 5 + 4 = 9
#   mobilenet_v2: first conv 1 + first block (no expansion) 2 + 16 blocks x 3 + last conv 1 = 52
BATCHNORM_LAYERS = {
    "tiny_cnn": 0,
    "ds_cnn": 9,
    "resnet8": 7,
    "mobilenet_v1_025": 27,
    "fc_autoencoder": 9,
    "mobilenet_v2": 52,
    "mobilenet_v2_035": 52,
    "digits": 0,
}

# The model files; mobilenet_v2.py serves both MobileNetV2 entries, and its
# module-level ModelUnderTest is the width 1.0 one.
MODEL_FILES = ["tiny_cnn", "ds_cnn", "resnet8", "mobilenet_v1_025", "fc_autoencoder", "mobilenet_v2", "digits"]


# ---------------------------------------------------------------- registry


def test_registry_lists_the_zoo_in_order():
    assert list(models.MODELS) == NAMES
    for name, entry in models.MODELS.items():
        assert isinstance(entry, models.ZooEntry)
        assert entry.name == name
        assert entry.summary
        # Only mobilenet_v2 (1.0) declares a wider tolerance; models/kiln/models/__init__.py says why.
        assert entry.tolerance_steps == (8 if name == "mobilenet_v2" else 1)
        assert entry.tolerance_fraction == 0.99


def test_unknown_model_is_a_usage_error_naming_the_known_models():
    with pytest.raises(UsageError) as raised:
        models.load("resnet9000")
    message = str(raised.value)
    assert "resnet9000" in message
    for name in NAMES:
        assert name in message
    assert "\n" not in message


def test_importing_the_zoo_builds_nothing():
    # In a fresh interpreter: importing the package imports no model file, and
    # importing the costly model files neither trains nor builds.
    code = """
import sys
import kiln.models
assert not [m for m in sys.modules if m.startswith("kiln.models.")], sorted(sys.modules)
assert "sklearn" not in sys.modules and "torchvision" not in sys.modules
import kiln.models.digits as digits, kiln.models.mobilenet_v2 as mobilenet_v2
for module in (digits, mobilenet_v2):
    assert "ModelUnderTest" not in vars(module) and "ModelInputs" not in vars(module)
assert digits._trained_state.cache_info().currsize == 0
assert "sklearn" not in sys.modules
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- every model


@pytest.mark.parametrize("name", NAMES)
def test_builds_and_runs(name):
    model, inputs = models.load(name)
    assert isinstance(model, nn.Module)
    assert not any(m.training for m in model.modules()), "not in eval mode"
    assert isinstance(inputs, tuple) and len(inputs) == 1
    assert inputs[0].dtype == torch.float32
    assert tuple(inputs[0].shape) == INPUT_SHAPES[name]

    output = run(model, inputs)
    assert tuple(output.shape) == OUTPUT_SHAPES[name]
    assert torch.isfinite(output).all()
    assert output.min() < output.max(), "all outputs equal"


@pytest.mark.parametrize("name", NAMES)
def test_building_twice_gives_identical_outputs(name):
    model_a, inputs_a = models.load(name)
    model_b, inputs_b = models.load(name)
    assert model_a is not model_b
    assert all(torch.equal(a, b) for a, b in zip(inputs_a, inputs_b, strict=True))
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert torch.equal(run(model_a, inputs_a), run(model_b, inputs_b))


def test_building_leaves_the_global_random_state_alone():
    torch.manual_seed(1234)
    expected = torch.rand(8)
    torch.manual_seed(1234)
    models.load("tiny_cnn")
    assert torch.equal(torch.rand(8), expected)


@pytest.mark.parametrize("name", NAMES)
def test_batchnorm_is_not_identity(name):
    model, _ = models.load(name)
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(norms) == BATCHNORM_LAYERS[name]
    for bn in norms:
        assert (bn.running_var > 0).all()
        assert not torch.equal(bn.running_var, torch.ones_like(bn.running_var))
        assert not torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))
        assert not torch.equal(bn.weight, torch.ones_like(bn.weight))
        assert not torch.equal(bn.bias, torch.zeros_like(bn.bias))


@pytest.mark.parametrize("name", MODEL_FILES)
def test_model_file_defines_aot_arm_compiler_names(name):
    module = importlib.import_module(f"kiln.models.{name}")
    model, inputs = module.ModelUnderTest, module.ModelInputs
    assert isinstance(model, nn.Module) and not model.training
    assert isinstance(inputs, tuple)
    assert tuple(inputs[0].shape) == INPUT_SHAPES[name]
    assert module.ModelUnderTest is model, "built again on the second access"
    assert callable(module.build)


def test_mobilenet_v2_file_builds_both_widths():
    from kiln.models import mobilenet_v2

    narrow, (narrow_input,) = mobilenet_v2.build(0.35)
    wide, (wide_input,) = mobilenet_v2.build(1.0)
    assert tuple(narrow_input.shape) == (1, 3, 96, 96)
    assert tuple(wide_input.shape) == (1, 3, 224, 224)
    # Width 0.35 rounds the first conv's 32 * 0.35 = 11.2 channels to 8, which is
    # below 90% of 11.2, so up to 16; the last conv keeps 1280 (scaled only above 1).
    assert narrow.features[0][0].out_channels == 16
    assert wide.features[0][0].out_channels == 32
    assert narrow.classifier.in_features == wide.classifier.in_features == 1280


@pytest.mark.parametrize("name", NAMES)
def test_torch_export(name):
    model, inputs = models.load(name)
    program = torch.export.export(model, inputs, strict=False)
    with torch.no_grad():
        exported = program.module()(*inputs)
    torch.testing.assert_close(exported, run(model, inputs))


# ---------------------------------------------------------------- published parameter counts
# torch's count against a published figure for the architecture the model file follows
# (a formula restating the file's widths would check nothing independent). Keras counts a
# BatchNorm's moving mean and variance as non-trainable parameters: torch's buffers.


def running_statistics(model: nn.Module) -> int:
    return sum(b.numel() for name, b in model.named_buffers() if name.endswith(("running_mean", "running_var")))


def test_ds_cnn_has_the_mlperf_tiny_reference_parameter_counts():
    # MLPerf Tiny's keyword-spotting reference model (v0.5/training/keyword_spotting,
    # kws_ref_model), Keras summary: 24,908 parameters, 23,756 trainable, 1,152 non-trainable.
    model = models.load("ds_cnn")[0]
    assert n_params(model) == 23_756
    assert running_statistics(model) == 1_152


def test_mobilenet_v1_at_full_width_has_keras_parameter_counts():
    # The same class at width 1.0, 224x224, 1000 classes against keras.applications.MobileNet's
    # summary: 4,253,864 parameters, 4,231,976 trainable, 21,888 non-trainable. Keras'
    # MobileNet has no convolution biases (kiln's file keeps the MLPerf Tiny reference's).
    from kiln.models.mobilenet_v1_025 import MobileNetV1

    with torch.device("meta"):  # shapes only: 4.2 M parameters, nothing allocated
        model = MobileNetV1(1.0, 224, 1000)
    biases = sum(m.bias.numel() for m in model.modules() if isinstance(m, nn.Conv2d) and m.bias is not None)
    assert n_params(model) - biases == 4_231_976
    assert running_statistics(model) == 21_888


def test_mobilenet_v2_parameter_count():
    # MobileNetV2 1.0's published count: torchvision's MobileNet_V2_Weights.IMAGENET1K_V1
    # lists num_params 3,504,872.
    assert n_params(models.load("mobilenet_v2")[0]) == 3_504_872


# ---------------------------------------------------------------- digits


@pytest.fixture(scope="module")
def digits():
    from kiln.models import digits

    model, inputs = models.load("digits")
    return digits, model, inputs


def test_digits_splits(digits):
    module, _, _ = digits
    x_train, y_train = module.train_split()
    x_test, y_test = module.test_split()
    # 1797 images; test_size 0.25 -> ceil(0.25 * 1797) = 450 test, 1347 train.
    assert x_test.shape == (450, 1, 8, 8) and y_test.shape == (450,)
    assert x_train.shape == (1347, 1, 8, 8) and y_train.shape == (1347,)
    assert x_test.dtype == torch.float32 and y_test.dtype == torch.int64
    assert 0.0 <= float(x_test.min()) and float(x_test.max()) <= 1.0
    assert float(x_train.max()) == 1.0  # 16 / 16
    # Stratified: each digit's share of the test set is a quarter of its images, +-1.
    test_counts = torch.bincount(y_test, minlength=10)
    all_counts = test_counts + torch.bincount(y_train, minlength=10)
    assert int(all_counts.sum()) == 1797
    assert ((test_counts - 0.25 * all_counts).abs() <= 1).all()


def test_digits_inputs_are_the_first_test_image(digits):
    module, _, inputs = digits
    x_test, _ = module.test_split()
    assert torch.equal(inputs[0], x_test[:1])


def test_digits_float_accuracy(digits):
    module, model, _ = digits
    x_test, y_test = module.test_split()
    accuracy = module.accuracy(model, x_test, y_test)
    print(f"digits: float test accuracy {accuracy:.4f}")
    assert accuracy >= 0.95


def test_digits_accuracy_helper_counts_correct_predictions(digits):
    module, _, _ = digits

    class Fixed(nn.Module):
        def forward(self, x):
            return torch.nn.functional.one_hot(torch.tensor([3, 1, 4, 1]), 10).float()

    x = torch.zeros(4, 1, 8, 8)
    assert module.accuracy(Fixed(), x, torch.tensor([3, 1, 4, 1])) == 1.0
    assert module.accuracy(Fixed(), x, torch.tensor([3, 0, 0, 1])) == 0.5


def test_digits_trains_once_per_process(digits):
    module, _, _ = digits
    models.load("digits")
    models.load("digits")
    assert module._trained_state.cache_info().misses == 1
