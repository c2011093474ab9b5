"""The compile spec's validation and the model front end's errors."""

import textwrap

import pytest
import torch

from kiln.errors import ModelError, UsageError
from kiln.frontend.export import export, load_model
from kiln.spec import CompileSpec


def test_defaults_come_from_the_board_description():
    spec = CompileSpec("ethos-u55-128").resolved()
    # boards/corstone-300/board.toml, family ethos-u55
    assert (spec.system_config, spec.memory_mode) == ("Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert CompileSpec("ethos-u65-256").resolved().memory_mode == "Dedicated_Sram_384KB"


@pytest.mark.parametrize(
    "spec,message",
    [
        (CompileSpec("ethos-u55-127"), "unknown target 'ethos-u55-127'"),
        (CompileSpec("ethos-u55-128", memory_mode="Dedicated_Sram"),
         "memory mode 'Dedicated_Sram' is not available on ethos-u55-128 on corstone-300 (available: Shared_Sram, "
         "Sram_Only)"),
        (CompileSpec("ethos-u55-256", memory_mode="Sram_Only", board="alif-e7-hp"),
         "memory mode 'Sram_Only' is not available on ethos-u55-256 on alif-e7-hp (available: Shared_Sram)"),
        (CompileSpec("ethos-u55-256", board="alif-e7-he"), "board alif-e7-he has no ethos-u55-256 NPU"),
        (CompileSpec("ethos-u55-128", system_config="Ethos_U55_Imaginary"), "unknown Vela system config"),
        (CompileSpec("ethos-u55-128", io="uint8"), "--io must be one of float, int8"),
        (CompileSpec("ethos-u55-128", io="int8", quantize=False), "--io int8 needs quantization"),
    ],
)  # fmt: skip
def test_bad_specs_are_usage_errors(spec, message):
    with pytest.raises(UsageError) as error:
        spec.resolved()
    assert message in str(error.value)


def write(tmp_path, text, name="model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


GOOD = """
    import torch
    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2
    ModelUnderTest = Net()
    ModelInputs = (torch.ones(1, 4),)
"""


def test_a_model_file_loads_and_exports(tmp_path):
    model = load_model(write(tmp_path, GOOD))
    assert model.name == "model" and model.inputs[0].shape == (1, 4)
    program = export(model)
    assert torch.equal(program.module()(torch.full((1, 4), -1.0)), torch.zeros(1, 4))


@pytest.mark.parametrize(
    "source,message",
    [
        ("import torch\nModelInputs = (torch.ones(1),)\n", "defines no ModelUnderTest (an nn.Module instance)"),
        ("import torch\nModelUnderTest = torch.nn.ReLU()\nModelInputs = [1, 2]\n", "defines no ModelInputs"),
        ("import torch\ndef f(:\n", "importing it failed: SyntaxError"),
        ("import torch\n\nraise RuntimeError('no weights here')\n", "RuntimeError: no weights here (model.py:3)"),
    ],
)
def test_broken_model_files_are_named(tmp_path, source, message):
    with pytest.raises(ModelError) as error:
        load_model(write(tmp_path, source))
    assert message in str(error.value) and "model.py" in str(error.value)


def test_a_model_that_fails_on_its_inputs(tmp_path):
    path = write(tmp_path, GOOD.replace("torch.relu(x) * 2", "torch.nn.functional.linear(x, torch.ones(3, 5))"))
    with pytest.raises(ModelError, match="model model fails on its example inputs: RuntimeError"):
        export(load_model(path))


def test_a_model_that_does_not_export(tmp_path):
    # Python control flow on a tensor's value cannot be captured by torch.export.
    path = write(tmp_path, GOOD.replace("return torch.relu(x) * 2", "return x if x.sum() > 0 else -x"))
    with pytest.raises(ModelError, match="torch.export cannot capture model model"):
        export(load_model(path))


def test_an_unknown_model_is_a_usage_error():
    with pytest.raises(UsageError, match="'no_such_model' is neither a zoo model"):
        load_model("no_such_model")
