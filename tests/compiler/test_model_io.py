"""Inputs and outputs as model libraries write them (kiln/frontend/export.py): keyword arguments,
int64 token ids and attention masks, position ids built in the model, non-persistent buffers;
outputs as dicts, tuples, nested tuples, dataclasses and named tuples, flattened depth first
(each output's path in the report is what torch's pytree gives for the eager output); within
two output steps of the PT2E reference on run-host."""

from __future__ import annotations

import dataclasses
import textwrap
from typing import NamedTuple

import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn

from kiln.errors import ModelError
from kiln.frontend.export import LoadedModel, load_model

VOCABULARY, LENGTH, WIDTH = 40, 8, 16


@dataclasses.dataclass
class EncoderOutput:  # a plain dataclass, registered with no one: kiln registers it for export
    logits: torch.Tensor
    hidden_states: tuple
    attentions: torch.Tensor | None = None


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


class TinyEncoder(nn.Module):
    """Token and position embeddings (positions by arange), a padding mask turned additive, a
    non-persistent buffer, pooled logits; returns `wrap(logits, hidden, pooled)`."""

    def __init__(self, wrap):
        super().__init__()
        torch.manual_seed(0)
        self.tokens, self.positions = nn.Embedding(VOCABULARY, WIDTH), nn.Embedding(LENGTH, WIDTH)
        self.head = nn.Linear(WIDTH, 4)
        self.register_buffer("gain", torch.linspace(0.5, 1.5, WIDTH), persistent=False)
        self.wrap = wrap

    def forward(self, input_ids, attention_mask=None):
        positions = torch.arange(input_ids.shape[1])
        hidden = (self.tokens(input_ids) + self.positions(positions)) * self.gain
        additive = (1.0 - attention_mask[:, :, None].to(hidden.dtype)) * -10000.0
        weights = (hidden.sum(-1, keepdim=True) + additive).softmax(1)
        pooled = (hidden * weights).sum(1)
        return self.wrap(self.head(pooled), hidden, pooled)


OUTPUTS = {  # name -> how forward returns (logits, hidden, pooled)
    "dict": lambda logits, hidden, pooled: {"logits": logits, "last_hidden_state": hidden, "pooler_output": pooled},
    "dataclass": lambda logits, hidden, pooled: EncoderOutput(logits, (hidden, {"pooled": pooled})),
    "nested_tuple_with_none": lambda logits, hidden, pooled: (logits, None, (hidden, (pooled, 3))),
    "named_tuple": lambda logits, hidden, pooled: Pair(logits, pooled),
    "tensor": lambda logits, hidden, pooled: logits,
}


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCABULARY, (1, LENGTH), generator=g)
    mask = torch.ones(1, LENGTH, dtype=torch.int64)
    mask[0, LENGTH - 2 - seed % 3 :] = 0
    return ids, mask


def _expected_paths(output) -> list[str]:
    """The eager output's tensors' paths, from torch's pytree (independent of export)."""
    leaves = pytree.tree_flatten_with_path(output)[0]
    return [pytree.keystr(path) for path, leaf in leaves if isinstance(leaf, torch.Tensor)]


@pytest.fixture(scope="module")
def compiled():
    from kiln import compile as kc
    from kiln.spec import CompileSpec

    out = {}
    for name, wrap in OUTPUTS.items():
        model = LoadedModel(name, TinyEncoder(wrap).eval(), _inputs(0), ("attention_mask",))
        out[name] = (kc.compile_model(model, CompileSpec("ethos-u85-256"), log=lambda _: None), model)
    return out


@pytest.mark.parametrize("name", OUTPUTS)
def test_outputs_flattened_depth_first_and_named_by_path(compiled, name):
    result, model = compiled[name]
    args, kwargs = model.arguments()
    eager = model.module(*args, **kwargs)
    outputs = [e for e in result.report["io"] if e["kind"] == "output"]
    assert [e["path"] for e in outputs] == _expected_paths(eager)
    shapes = [list(t.shape) for t in pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)]
    assert [e["shape"] for e in outputs] == shapes
    inputs = [(e["path"], e["dtype"]) for e in result.report["io"] if e["kind"] == "input"]
    assert inputs == [("input_ids", "int64"), ("attention_mask", "int64")]


@pytest.mark.parametrize("name", OUTPUTS)
def test_run_host_within_two_steps_of_pt2e(compiled, name):
    from kiln.reference import run_host as host
    from tests.compiler.random_models import steps_off_pt2e

    result, _ = compiled[name]
    for seed in (0, 1):
        inputs = _inputs(seed)
        got = host.run(result.pte, [x.numpy() for x in inputs])
        assert steps_off_pt2e(result, inputs, got)[0] <= 2


def test_printed_report_names_keyword_inputs_and_structured_outputs(compiled):
    from kiln.compile import format_report

    text = format_report(compiled["dataclass"][0].report)
    assert "  input 0: int64[1, 8]" in text
    assert "  input 1 (attention_mask): int64[1, 8]" in text
    assert "  output 2 (.hidden_states[1]['pooled']): float32[1, 16]" in text
    assert "  output 0: float32[1, 4]" in format_report(compiled["tensor"][0].report)


def test_positions_and_buffers_become_constants(compiled):
    """arange positions fold into a constant; the model's only CPU ops are the index check, the
    mask's int64 steps and the I/O conversions."""
    result, _ = compiled["tensor"]
    cpu = {o["op"] for o in result.report["ops"] if o["where"] == "cpu"}
    assert "aten.arange" not in cpu
    assert cpu <= {
        "kiln.checked_index",
        "aten.unsqueeze",
        "aten._to_copy",
        "quantized_decomposed.quantize_per_tensor",
        "quantized_decomposed.dequantize_per_tensor",
    }


MODEL_FILE = """
import torch
from torch import nn

class Model(nn.Module):
    def forward(self, x, scale, *, bias):
        return {{"y": x * scale + bias}}

ModelUnderTest = Model()
ModelInputs = {inputs}
"""


@pytest.mark.parametrize(
    "inputs, keywords",
    [
        ("(torch.ones(2), torch.ones(2), {'bias': torch.zeros(2)})", ("bias",)),
        ("{'x': torch.ones(2), 'scale': torch.ones(2), 'bias': torch.zeros(2)}", ("x", "scale", "bias")),
    ],
)
def test_a_model_file_gives_keyword_inputs(tmp_path, inputs, keywords):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODEL_FILE.format(inputs=inputs)))
    model = load_model(str(path))
    assert model.keywords == keywords and len(model.inputs) == 3
    from kiln.frontend.export import export, io_paths

    module = export(model).module(check_guards=False)
    assert io_paths(module) == (["x", "scale", "bias"], ["['y']"])


def test_a_model_file_with_other_inputs_is_refused(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODEL_FILE.format(inputs="({'bias': 3},)")))
    with pytest.raises(ModelError, match="defines no ModelInputs"):
        load_model(str(path))


def test_a_model_returning_no_tensor_is_refused():
    from kiln import graph
    from kiln.frontend.export import export

    module = export(LoadedModel("none", Lambda().eval(), (torch.ones(2),))).module(check_guards=False)
    with pytest.raises(ModelError, match="returns no tensor"):
        graph.from_pt2e(module)


class Lambda(nn.Module):
    def forward(self, x):
        return (None, 3)
