"""index_copy (and index_put with one index tensor, which the front end makes an index_copy) of
quantized values: one TOSA SCATTER on Ethos-U85 by int32 indices that a CPU kernel
(kiln.checked_index) checked against the size of the dim written and narrowed first; on Ethos-U55
it runs on the CPU (aten::index_copy.out) with the rule's reason. The models are a KV cache's
updates in the pure form (the cache an input, the updated cache an output), at 8 and 16 bits:
checked against the PT2E reference on run-host, and kiln's U85 model against tosa_reference_model
on Vela's stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from kiln import boards
from kiln import compile as kc
from kiln.errors import HostError, VelaRefusal
from kiln.frontend.export import LoadedModel
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.reference import run_host as host
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec
from tests.compiler.cache_updates import MODELS, WRITTEN_DIM, D, P, Step, T, make, step_inputs
from tests.compiler.helpers import output_scales, partition_feeds, run_tosa

CHECK_REASON = (
    "checks a scatter's indices against the size of the dim it writes and narrows them to int32 (a CPU kernel)"
)
U55_RULE = (
    "aten.index_copy: Vela 5.2.0 scatters (TOSA SCATTER, the DMA's indexed mode) on Ethos-U85, not on Ethos-U55 or U65"
)


@pytest.fixture(
    scope="module",
    params=[(t, b, m) for t in ("ethos-u85-256", "ethos-u55-128") for b in (8, 16) for m in MODELS],
    ids=lambda p: f"{p[0]}-int{p[1]}-{p[2]}",
)
def compiled(request):
    target, bits, name = request.param
    torch.manual_seed(5)
    model = MODELS[name]().eval()
    result = kc.compile_model(
        LoadedModel(name, model, make(name, 7, 0)), CompileSpec(target, activation_bits=bits), log=lambda line: None
    )
    return target, bits, name, result


def test_scatters_run_where_the_rules_say(compiled):
    target, _, name, result = compiled
    cpu = {p.op.op_type: p.reason for p in result.partitioning.placements if p.partition is None}
    if name != "prefill":  # constant positions need no check at run time
        assert cpu.pop("kiln.checked_index") == CHECK_REASON
    if name == "flat":  # a negative position counts from the end: where(i < 0, i + T, i), int64 on the CPU
        for op in ("aten.lt", "aten.add", "aten.where"):
            cpu.pop(op)
    if target == "ethos-u55-128":
        assert cpu.pop("aten.index_copy") == U55_RULE
    assert set(cpu) <= {"quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor"}
    if target == "ethos-u85-256":
        assert len(result.partitioning.partitions) == 1  # the key's linear, the scatter and the max


def test_run_host_equals_pt2e_at_every_position(compiled):
    """The cache's rows not written equal PT2E's exactly; at 16 bits the written row (the key's
    linear, rounded once more by TOSA's 16-bit rescale than by PT2E's float) and the max over it
    may be one step off, at 8 bits nothing."""
    _, bits, name, result = compiled
    positions = (0, 1, T - 1) + ((-1, -T) if name == "flat" else ())
    for seed, position in enumerate(positions, start=10):
        inputs = make(name, position, seed)
        got = host.run(result.pte, [t.numpy() for t in inputs])
        want = [w.numpy() for w in result.quantized_module(*inputs)]
        written = np.zeros(want[0].shape, bool)
        rows = range(P) if name == "prefill" else [position % T]
        np.moveaxis(written, WRITTEN_DIM[name], 0)[list(rows)] = True
        assert np.array_equal(got[0][~written], want[0][~written])
        for g, w, scale in zip(got, want, output_scales(result.quantized_module), strict=True):
            assert np.max(np.rint(np.abs(g - w) / scale)) <= (0 if bits == 8 else 1), (name, position)


def test_an_index_past_the_cache_is_an_error_not_a_write(compiled):
    _, _, name, result = compiled
    if name == "prefill":
        pytest.skip("constant positions are checked when compiling")
    for position, shown in ((T, T), (T + 5, T + 5)) + (((-T - 1, -1),) if name == "flat" else ((-1, -1),)):
        inputs = make(name, position, 3)
        with pytest.raises(HostError, match=f"index {shown} is out of range 0..{T - 1}"):
            host.run(result.pte, [t.numpy() for t in inputs])


def test_the_u85_model_runs_vela_s_scatters_to_tosa_reference_model_s_bytes(compiled):
    target, bits, name, result = compiled
    if target != "ethos-u85-256":
        pytest.skip("Vela scatters on Ethos-U85 only")
    rng = np.random.default_rng(3)
    (partition,) = result.partitioning.partitions
    assert [op.op_type for op in partition.ops].count("aten.index_copy") == 1
    tosa = tosa_lowering.lower(partition, boards.target(target).npu)
    feeds = partition_feeds(partition, rng)
    compiled_stream = vela.compile_tosa(tosa, name, target, "Ethos_U85_SYS_DRAM_Mid", "Sram_Only")
    raw, run = run_compiled(compiled_stream, feeds, config_for(target))
    assert run.fault is None, run.fault
    assert run.coverage.as_dict()["U85 dma"]["scatter"] > 0
    for got, want in zip(raw, run_tosa(tosa, feeds)):
        assert got == np.ascontiguousarray(want).tobytes()
    # kiln.families.DMA_SCATTERS: Ethos-U85 only
    with pytest.raises(VelaRefusal, match="Scatter"):
        vela.compile_tosa(tosa, name, "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")


class Repeats(nn.Module):
    """Two updates the NPU must not take: two run-time positions (they may repeat), and constant
    positions that repeat."""

    def __init__(self):
        super().__init__()
        self.register_buffer("twice", torch.tensor([2, 5, 2]))

    def forward(self, cache, positions, k, rows):
        return cache.index_copy(1, positions, k * 2.0), cache.index_copy(1, self.twice, rows * 3.0)


def test_rows_that_may_be_written_twice_stay_on_the_cpu():
    """TOSA SCATTER leaves a row written twice undefined: two run-time positions, or constant ones
    with a repeat, stay on the CPU with the rule's reason, and run there as PT2E's reference."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    inputs = (
        torch.randn(1, T, D, generator=g),
        torch.tensor([3, 9]),
        torch.randn(1, 2, D, generator=g),
        torch.randn(1, 3, D, generator=g),
    )
    result = kc.compile_model(
        LoadedModel("repeats", Repeats().eval(), inputs), CompileSpec("ethos-u85-256"), log=lambda line: None
    )
    reasons = [p.reason for p in result.partitioning.placements if p.op.op_type == "aten.index_copy"]
    rule = "TOSA SCATTER leaves a row written twice undefined, so the NPU takes one index computed at run time"
    assert reasons[0] == f"aten.index_copy at indices of shape [2]: {rule}, or constant indices without repeats"
    assert reasons[1] == f"aten.index_copy at indices of shape [3]: {rule}, or constant indices without repeats"
    got = host.run(result.pte, [t.numpy() for t in inputs])
    assert np.array_equal(got[0], result.quantized_module(*inputs)[0].numpy())


class Planes(nn.Module):
    """An update of [300, 300, 2] along its last dim: 90,000 planes (N) of 2 rows."""

    def forward(self, cache, position, k):
        return cache.index_copy(2, position, k * 2.0)


def test_more_planes_than_the_dma_counts_stay_on_the_cpu():
    """The DMA counts planes in a 16-bit register (DMA0_SIZE1): Vela 5.2.0 compiles a SCATTER of
    70,000 planes, and kiln's U85 model, running the stream as the registers say, writes other
    rows than tosa_reference_model; kiln keeps such an update on the CPU with the rule's reason."""
    from tests.simulator import helpers
    from tests.simulator.npu_cases import Graph, attr

    g = Graph()
    rng = np.random.default_rng(0)
    values = g.input(rng.integers(-128, 128, (70000, 2, 1)).astype(np.int8), "int8")
    indices = g.input(rng.integers(0, 2, (70000, 1)).astype(np.int32), "int32")
    rows = g.input(rng.integers(-128, 128, (70000, 1, 1)).astype(np.int8), "int8")
    g.output(g.op("SCATTER", [values, indices, rows], (70000, 2, 1), "int8", attr("Scatter")), "70000 planes")
    tosa = g.serialize()
    stream = vela.compile_tosa(tosa, "planes", "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only")
    diffs, _ = helpers.compare(tosa, stream, g.inputs, "ethos-u85-256")
    assert diffs != [0]

    inputs = (torch.randn(300, 300, 2), torch.tensor([1]), torch.randn(300, 300, 1))
    result = kc.compile_model(
        LoadedModel("planes", Planes().eval(), inputs), CompileSpec("ethos-u85-256"), log=lambda line: None
    )
    (reason,) = [p.reason for p in result.partitioning.placements if p.op.op_type == "aten.index_copy"]
    assert reason == (
        "aten.index_copy at indices of shape [1] along dim 2 of [300, 300, 2]: the NPU's DMA writes at most 65535 "
        "rows into each of at most 65535 planes (the elements of the dims before dim)"
    )


@pytest.mark.parametrize("bits", [8, 16])
def test_a_decode_step_is_one_npu_partition_around_one_index_check(bits):
    """cache_updates.Step (rotary rows gathered at the position, both caches written there, SDPA over
    them with the mask arange(T) <= position, argmax) on ethos-u85-256: one partition, its mask
    compared on the NPU from the checked position; on the CPU only the one check of the position
    (all five index uses share it) and argmax's widening to int64. run-host equals PT2E (the caches
    at 16 bits within a step), tokens included; kiln's NPU model runs the partition to
    tosa_reference_model's bytes; a position past the caches is the check's error."""
    torch.manual_seed(0)
    target = "ethos-u85-256"
    result = kc.compile_model(
        LoadedModel("step", Step().eval(), step_inputs(7, 0)),
        CompileSpec(target, activation_bits=bits),
        log=lambda line: None,
    )
    cpu = [p.op.op_type for p in result.partitioning.placements if p.partition is None]
    assert sorted(op for op in cpu if not op.startswith("quantized_decomposed")) == [
        "aten._to_copy",
        "kiln.checked_index",
    ]
    (partition,) = result.partitioning.partitions
    assert "aten.le" in [op.op_type for op in partition.ops]
    for position in (0, 5, T - 1):
        inputs = step_inputs(position, position + 1)
        got = host.run(result.pte, [t.numpy() for t in inputs])
        want = [w.numpy() for w in result.quantized_module(*inputs)]
        assert np.array_equal(got[2], want[2])  # the token
        for g, w, v in zip(got[:2], want[:2], result.graph.outputs):  # the caches, in their steps
            scale = v.producer.inputs[0].qparams.scale  # the integers the output dequantizes
            assert np.max(np.rint(np.abs(g - w) / scale)) <= (0 if bits == 8 else 1)
    with pytest.raises(HostError, match=f"index {T} is out of range 0..{T - 1}"):
        host.run(result.pte, [t.numpy() for t in step_inputs(T, 1)])
    tosa = tosa_lowering.lower(partition, boards.target(target).npu)
    feeds = partition_feeds(partition, np.random.default_rng(4))
    raw, run = run_compiled(
        vela.compile_tosa(tosa, "step", target, "Ethos_U85_SYS_DRAM_Mid", "Sram_Only"), feeds, config_for(target)
    )
    assert run.fault is None, run.fault
    assert [bytes(r) for r in raw] == [np.ascontiguousarray(w).tobytes() for w in run_tosa(tosa, feeds)]


class Mask(nn.Module):
    """Attention scores masked by arange(T) <= position, optionally beside a rotary row gathered at the
    position (which makes kiln check it)."""

    def __init__(self, rotary: bool):
        super().__init__()
        self.rotary = rotary
        self.register_buffer("steps", torch.arange(T))
        self.register_buffer("cos", torch.cos(torch.arange(T)[:, None] * torch.linspace(0.1, 1.0, T)[None]))

    def forward(self, scores, position):
        if self.rotary:
            scores = scores * self.cos.index_select(0, position)
        return torch.where(self.steps <= position, scores, float("-inf")).softmax(-1)


@pytest.mark.parametrize("target", ["ethos-u85-256", "ethos-u55-128"])
@pytest.mark.parametrize("rotary", [True, False])
def test_a_mask_of_a_checked_position_compares_the_checked_index(target, rotary):
    """Where the position is also a gather's index (checked on the CPU), the mask compares the checked
    int32 position with arange(T) narrowed to int32: on the NPU of Ethos-U85, on the CPU of U55 (no
    comparisons there); where nothing checks it, the int64 comparison stays on the CPU. run-host
    equals PT2E at every position."""
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(1, 2, 1, T, generator=g)
    result = kc.compile_model(
        LoadedModel("mask", Mask(rotary).eval(), (scores, torch.tensor([5]))),
        CompileSpec(target),
        log=lambda line: None,
    )
    (le,) = [p for p in result.partitioning.placements if p.op.op_type == "aten.le"]
    assert [v.dtype for v in le.op.inputs] == (["int32", "int32"] if rotary else ["int64", "int64"])
    assert (le.partition is not None) == (rotary and target == "ethos-u85-256")
    for position in (0, 5, T - 1):
        inputs = (scores, torch.tensor([position]))
        got = host.run(result.pte, [t.numpy() for t in inputs])
        assert np.array_equal(got[0], result.quantized_module(*inputs).numpy())


def test_vela_drops_a_graph_output_made_by_a_reshape_that_another_op_reads():
    """Why kiln's Lowerer reshapes a RESHAPE's input rather than its result, and gives a graph output
    made by a RESHAPE that other ops read a RESHAPE of its own: Vela 5.2.0 (Ethos-U85 and U55 alike)
    compiles x -> CLAMP -> RESHAPE (a graph output) -> TRANSPOSE, or -> RESHAPE back -> TRANSPOSE (the
    other output), into a stream with one output, the RESHAPE's gone; the TRANSPOSE reading another
    RESHAPE of the CLAMP's result, or that result itself, keeps both."""
    import tosa_serializer as ts

    from tests.simulator.npu_cases import Graph, attr

    def graph(form: str) -> bytes:
        g = Graph()
        x = g.input(np.arange(-48, 48, dtype=np.int8).reshape(3, 16, 2), "int8")
        low, high = (list(np.array([v], np.int8).view(np.uint8)) for v in (-40, 40))
        clamped = g.op("CLAMP", [x], (3, 16, 2), "int8", attr("Clamp", low, high, ts.NanPropagationMode.PROPAGATE))

        def reshaped(name: str, shape: list[int]) -> str:
            dims = g.ser.addConst([len(shape)], ts.DType.SHAPE, np.array(shape, np.int64), name=g.name("shape")).name
            return g.op("RESHAPE", [name, dims], shape, "int8", attr("Reshape"))

        returned = reshaped(clamped, [1, 3, 16, 2])
        g.output(returned, "the clamp as [1, 3, 16, 2]")
        read = {
            "output read": returned,
            "output reshaped back": reshaped(returned, [3, 16, 2]),
            "another reshape": reshaped(clamped, [1, 3, 16, 2]),
            "the clamp": clamped,
        }[form]
        perm = [0, 2, 1] if len(g.tensors[read].shape) == 3 else [0, 2, 1, 3]
        shape = [g.tensors[read].shape[p] for p in perm]
        g.output(g.op("TRANSPOSE", [read], shape, "int8", attr("Transpose", perm)), "transposed")
        return g.serialize()

    forms = {"output read": 1, "output reshaped back": 1, "another reshape": 2, "the clamp": 2}
    for form, outputs in forms.items():
        for target, system in (
            ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid"),
            ("ethos-u55-128", "Ethos_U55_High_End_Embedded"),
        ):
            assert len(vela.compile_tosa(graph(form), "outputs", target, system, "Shared_Sram").outputs) == outputs, (
                form
            )
