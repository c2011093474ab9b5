"""A language model whose head is tied to its embedding (tests/fixtures/tied_lm.py, as SmolLM2's and
GPT-2's heads are) compiles for the Ethos-U85 into a program no bigger than its int8 weights plus its
KV cache: the table is quantized once (one scale, so the gather and the head read the same
integers) and stored once, the GATHER's constant, which the head reads as a MATMUL operand. Before,
the head held a second copy as Vela's encoded weights (+0.55 MB on this model, 77 % of its weights).

The program is decode's alone, as bench/llm.py compiles SmolLM2-135M's shape: each method's delegate
holds the weights its command stream reads (Vela encodes them per stream), so a program of prefill and
decode holds them twice. The parameter count and the cache's bytes are worked out by hand from the
fixture's config; the table's integers by PT2E's per-tensor symmetric rule written out here."""

from __future__ import annotations

import pytest
import torch

from kiln import compile as kc
from kiln.errors import UsageError
from kiln.frontend.export import LoadedModel
from kiln.lower import ethosu_payload
from kiln.pte.reader import deserialize
from kiln.pte.writer import without_reference_data
from kiln.spec import CompileSpec
from tests.fixtures import tied_lm

from .test_pte import et_tool, needs_executorch

TARGET = "ethos-u85-256"
# Beyond the weights and the cache, the program holds Vela's command stream (2 % here), its per-output
# channel scales and biases, the rotary tables and the .pte's own tables: 2.7 % measured; against the
# head's second copy of the table, which adds 77 %.
ALLOWANCE = 0.04


def _compiled(**spec):
    model = tied_lm.build(("decode",))
    loaded = LoadedModel("tied_lm", model, model.kiln_methods["decode"])
    return model, kc.compile_model(loaded, CompileSpec(TARGET, **spec), log=lambda line: None)


def _program_bytes(result) -> int:
    """The .pte the firmware holds: without the reference TOSA graphs only run-host reads."""
    return len(without_reference_data(deserialize(result.pte)))


def _parameters_and_cache(c) -> tuple[int, int]:
    """The parameters of config `c` (the tied table once) and its int8 cache's bytes, by hand."""
    head_dim, kv_width = c.dim // c.heads, c.kv_heads * c.dim // c.heads
    per_layer = 2 * c.dim * c.dim + 2 * c.dim * kv_width + 3 * c.dim * c.hidden + 2 * c.dim  # q, o; k, v; SwiGLU; norms
    return c.vocab * c.dim + c.layers * per_layer + c.dim, c.layers * 2 * c.kv_heads * c.context * head_dim


@pytest.fixture(scope="module")
def tied():
    return (tied_lm, *_compiled())


def test_every_op_but_the_index_checks_and_the_edges_runs_on_the_npu_in_one_delegate(tied):
    _, _, result = tied
    method = result.report["methods"]["decode"]
    assert len(method["delegates"]) == 1 and method["macs"]["npu_share"] == 1.0
    cpu = {o["op"] for o in method["ops"] if o["where"] == "cpu"}
    assert cpu <= {"kiln.checked_index", "aten._to_copy", "quantized_decomposed.dequantize_per_tensor"}, cpu
    assert {"aten.embedding", "aten.linear"} <= {o["op"] for o in method["ops"] if o["where"] == "npu"}


def test_the_program_is_no_bigger_than_its_int8_weights_plus_its_cache(tied):
    fixture, model, result = tied
    parameters, cache = _parameters_and_cache(fixture.CONFIG)
    assert parameters == sum(p.numel() for p in model.parameters())
    assert result.report["state"]["bytes"] == cache
    program = _program_bytes(result)
    assert program <= (parameters + cache) * (1 + ALLOWANCE), (program, parameters, cache)


def test_the_table_is_stored_once_as_pt2e_quantizes_it_per_tensor(tied):
    """The table's int8 bytes (PT2E's symmetric per-tensor rule: scale = max |w| / 127, each value
    round(w / scale)) occur once in the delegate's weights, and nothing else as large is there."""
    fixture, model, result = tied
    w = model.embed.weight.detach()
    scale = w.abs().max() / 127
    table = torch.clamp(torch.round(w * (1.0 / scale)), -127, 127).to(torch.int8).numpy().tobytes()
    f = deserialize(result.pte)
    (plan,) = [p for p in f.program.execution_plans if p.name == "decode"]
    (delegate,) = plan.delegates
    weights = ethosu_payload.decode(f.delegate_payload(delegate)).weight_data
    assert weights.count(table) == 1
    assert len(weights) - len(table) < len(table) // 2, len(weights)


@pytest.mark.executorch
@needs_executorch
def test_executorch_reads_the_program(tied, tmp_path):
    """ExecuTorch 1.5.1's deserializer (tests/tools/et_dump.py) reads decode's plan and its one
    EthosUBackend delegate."""
    _, _, result = tied
    path = tmp_path / "tied_lm.pte"
    path.write_bytes(result.pte)
    plans = et_tool("et_dump.py", path)["restored"]["execution_plan"]
    (decode,) = [p for p in plans if p["name"] == "decode"]
    assert [d["id"] for d in decode["delegates"]] == ["EthosUBackend"]


def test_tied_head_weights_keeps_the_heads_own_copy_and_is_faster_by_velas_total(tied):
    """--tied-head weights: the head's per-channel copy as Vela's encoded weights, the table's size
    again (less Vela's compression of it) in the program, and fewer of Vela's total cycles, the
    head's weights streamed where its MATMUL reads the table as a feature map."""
    fixture, _, table = tied
    _, weights = _compiled(tied_head="weights")
    c = fixture.CONFIG
    assert _program_bytes(weights) - _program_bytes(table) > 0.8 * c.vocab * c.dim
    (fast,) = weights.report["methods"]["decode"]["delegates"]
    (small,) = table.report["methods"]["decode"]["delegates"]
    assert fast["total_cycles"] < small["total_cycles"]


def test_an_unknown_tied_head_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="--tied-head must be one of table, weights, not 'twice'"):
        CompileSpec(TARGET, tied_head="twice").resolved()
