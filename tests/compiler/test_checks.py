"""kiln.checks: each check passes on a real compiled model and names what broke when that
model's graph, partitioning or program is broken on purpose; the driver runs them."""

from __future__ import annotations

import dataclasses

import pytest

from kiln import boards, checks, graph
from kiln import compile as kc
from kiln.errors import InternalError
from kiln.partition import partitioner as partition
from kiln.program import builder as program
from kiln.spec import CompileSpec, Exclusions

TARGET = "ethos-u55-128"
quantize_op = graph.QUANTIZE[0]


@pytest.fixture(scope="module")
def compiled():
    """tiny_cnn compiled for the NPU: quantize, conv, conv, pool, flatten, linear, dequantize."""
    return kc.compile_model("tiny_cnn", CompileSpec(TARGET), log=lambda line: None)


def stages(compiled, exclusions=Exclusions()):
    """A fresh graph, partitioning and program of the compiled model, to break at will."""
    g = graph.from_pt2e(compiled.quantized_module)
    parts = partition.partition(g, boards.target(TARGET).npu, exclusions)
    return g, parts, program.build(g, parts)


def op(g, op_type: str, n: int = 0):
    return [o for o in g.ops if o.op_type == op_type][n]


def broken(stage: str, check, *results) -> str:
    """The check's message (each passes on the unbroken model: the first test), after
    asserting that the stage's checks, as the driver runs them, raise InternalError naming
    the stage (an earlier check of the stage may see the breakage first)."""
    problem = check(*results)
    assert problem is not None, f"{check.__name__} missed the breakage"
    with pytest.raises(InternalError, match=f"after the {stage} stage: "):
        checks.after(stage, *results)
    return problem


def test_a_healthy_compile_passes_every_check(compiled):
    g, parts, prog = stages(compiled)
    assert len(parts.partitions) == 1 and len(compiled.vela) == 1
    for stage, results in [
        ("fold", (g,)),
        ("partition", (parts,)),
        ("lower", (compiled.partitioning, compiled.tosa)),
        ("vela", (compiled.partitioning, compiled.vela)),
        ("program", (prog,)),
    ]:
        for check in checks.CHECKS[stage]:
            assert check(*results) is None, (stage, check.__name__)
    two = stages(compiled, Exclusions(node_names=("conv2d_1",)))[1]
    assert len(two.partitions) == 2 and all(check(two) is None for check in checks.CHECKS["partition"])


# ---- fold ----------------------------------------------------------------------------------------
def test_ops_out_of_order(compiled):
    g, _, _ = stages(compiled)
    g.ops.reverse()
    assert "reads" in broken("fold", checks.values_produced_before_use, g)
    assert "before any op produces it" in checks.values_produced_before_use(g)


def test_an_output_never_produced(compiled):
    g, _, _ = stages(compiled)
    g.ops.pop()  # the final dequantize
    assert "program output" in broken("fold", checks.values_produced_before_use, g)


def test_a_lost_user_link(compiled):
    g, _, _ = stages(compiled)
    conv = op(g, "aten.conv2d")
    conv.output.users.clear()  # conv2 still reads it
    assert conv.output.name in broken("fold", checks.producers_and_users_agree, g)


def test_a_constant_whose_array_has_another_shape(compiled):
    g, _, _ = stages(compiled)
    weight = op(g, "aten.conv2d").inputs[1]
    weight.shape = (weight.shape[0] + 1, *weight.shape[1:])
    problem = broken("fold", checks.shapes_and_dtypes_consistent, g)
    assert f"constant {weight.name}" in problem and "holds int8" in problem


def test_a_quantize_op_that_changes_the_shape(compiled):
    g, _, _ = stages(compiled)
    q = next(o for o in g.ops if o.target is quantize_op)
    q.output.shape = (1, 1, 8, 9)
    assert "turns shape [1, 1, 8, 8] into [1, 1, 8, 9]" in broken("fold", checks.shapes_and_dtypes_consistent, g)


def test_a_quantized_weight_without_qparams(compiled):
    g, _, _ = stages(compiled)
    weight = op(g, "aten.conv2d").inputs[1]
    weight.qparams = None
    assert "has no quantization parameters" in broken("fold", checks.quantized_values_have_qparams, g)


def test_qparams_outside_their_dtype(compiled):
    g, _, _ = stages(compiled)
    out = op(g, "aten.conv2d").output
    out.qparams = dataclasses.replace(out.qparams, qmax=255)  # int8 ends at 127
    assert "quantization range [-128, 255]" in broken("fold", checks.quantized_values_have_qparams, g)


def test_a_float_op_reading_an_integer_value(compiled):
    g, _, _ = stages(compiled)
    conv = op(g, "aten.conv2d")
    conv.output.qparams = None  # now a float op, but its input is still the quantized input
    assert f"float op {conv.name}" in broken("fold", checks.floats_meet_integers_at_quantize_ops, g)


# ---- partition -------------------------------------------------------------------------------------
def test_a_unit_scheduled_twice(compiled):
    _, parts, _ = stages(compiled)
    parts.schedule.append(parts.schedule[0])
    assert "exactly once" in broken("partition", checks.every_op_placed_once, parts)


def test_a_partition_holding_an_op_placed_on_the_cpu(compiled):
    g, parts, _ = stages(compiled)
    parts.partitions[0].ops.append(g.ops[-1])  # the dequantize, placed on the CPU
    assert "holds other ops" in broken("partition", checks.every_op_placed_once, parts)


def test_a_float_op_in_a_partition(compiled):
    g, parts, _ = stages(compiled)
    parts.partitions[0].ops.insert(0, g.ops[0])  # the quantize
    assert "not quantized" in broken("partition", checks.partitions_hold_quantized_ops, parts)


def test_a_partition_missing_an_input(compiled):
    _, parts, _ = stages(compiled)
    parts.partitions[0].inputs.clear()
    assert "lists inputs []" in broken("partition", checks.partition_boundaries_complete, parts)


def merged_around_a_cpu_op(compiled):
    """conv2 excluded: partitions {conv1} and {pool, flatten, linear} around it, merged into
    one, which needs conv2's output while conv2 needs the partition's: a cycle. Returns the
    graph, the partitioning (consistent in all but order) and conv2."""
    g, parts, _ = stages(compiled, Exclusions(node_names=("conv2d_1",)))
    first, second = parts.partitions
    quantize, conv1, conv2, *_, linear, _ = g.ops
    assert [o.name for o in first.ops] == [conv1.name] and second.ops[-1] is linear
    first.ops += second.ops
    first.inputs, first.outputs = [quantize.output, conv2.output], [conv1.output, linear.output]
    parts.partitions.remove(second)
    parts.schedule.remove(second)
    for placement in parts.placements:
        placement.partition = 0 if placement.partition is not None else None
    return g, parts, conv2


def test_a_partition_taking_its_inputs_in_another_order(compiled):
    _, parts, conv2 = merged_around_a_cpu_op(compiled)
    first = parts.partitions[0]
    quantized_input = first.inputs[0]
    first.inputs.reverse()
    problem = broken("partition", checks.partition_boundaries_complete, parts)
    assert (
        f"lists inputs {[conv2.output.name, quantized_input.name]}, "
        f"its ops need {[quantized_input.name, conv2.output.name]}"
    ) in problem


def test_merged_partitions_around_a_cpu_op_form_a_cycle(compiled):
    _, parts, conv2 = merged_around_a_cpu_op(compiled)
    with pytest.raises(InternalError, match="after the partition stage: partitions_acyclic: "):
        checks.after("partition", parts)
    problem = checks.partitions_acyclic(parts)
    assert f"partition 0 reads {conv2.output.name}" in problem and "a cycle" in problem


def test_the_scheduler_leaves_a_cycle_to_the_check(compiled):
    """Scheduled afresh, the cyclic partitioning still lists every unit once (conv2 needs the
    partition, the partition needs conv2: neither is ever ready), and partitions_acyclic, the
    one cycle check, reports it."""
    g, parts, conv2 = merged_around_a_cpu_op(compiled)
    parts.schedule = partition._schedule(g, parts.placements, parts.partitions)
    assert checks.every_op_placed_once(parts) is None
    problem = broken("partition", checks.partitions_acyclic, parts)
    assert f"partition 0 reads {conv2.output.name}" in problem and "a cycle" in problem


# ---- lower and vela ----------------------------------------------------------------------------------
def test_an_empty_tosa_graph(compiled):
    assert "1 empty" in broken("lower", checks.one_tosa_graph_per_partition, compiled.partitioning, [b""])
    assert "2 TOSA graphs" in checks.one_tosa_graph_per_partition(compiled.partitioning, compiled.tosa * 2)


def test_a_vela_stream_with_other_inputs(compiled):
    (result,) = compiled.vela
    wrong = dataclasses.replace(result, inputs=result.inputs * 2)
    problem = broken("vela", checks.delegate_io_matches_partitions, compiled.partitioning, [wrong])
    assert "partition 0 inputs are [64] bytes" in problem  # tiny_cnn's int8 input: 1x1x8x8


# ---- program -------------------------------------------------------------------------------------
def test_an_instruction_naming_a_missing_value(compiled):
    _, _, prog = stages(compiled)
    prog.instructions[0].args.append(len(prog.values))
    assert "instruction 0 names values" in broken("program", checks.instructions_reference_valid_indices, prog)


def test_a_tensor_without_a_place(compiled):
    _, _, prog = stages(compiled)
    del prog.offsets[id(prog.values[prog.outputs[0]].value)]
    assert "has no place" in broken("program", checks.every_tensor_planned, prog)


def test_a_misaligned_tensor(compiled):
    _, _, prog = stages(compiled)
    prog.offsets[id(prog.values[prog.inputs[0]].value)] += 4
    assert "16-byte aligned" in broken("program", checks.every_tensor_planned, prog)


def test_instructions_out_of_data_order(compiled):
    _, _, prog = stages(compiled)
    prog.instructions.reverse()  # the delegate first, before the quantize that writes its input
    assert "before any instruction writes it" in broken("program", checks.values_written_before_read, prog)


def test_two_live_tensors_sharing_bytes(compiled):
    """Instruction 0 quantizes the float input into the NPU's int8 input: both are alive then."""
    _, _, prog = stages(compiled)
    first = prog.instructions[0]
    assert prog.operators[first.index][0] == "cortex_m::quantize_per_tensor" and first.args[0] == prog.inputs[0]
    float_input, int8_input = (prog.values[i].value for i in (first.args[0], first.args[-1]))
    prog.offsets[id(int8_input)] = prog.offsets[id(float_input)]
    assert "are alive together" in broken("program", checks.live_buffers_disjoint, prog)


# ---- the driver ---------------------------------------------------------------------------------
def test_the_driver_stops_at_a_broken_stage(monkeypatch):
    """A partitioner that forgets its schedule: compile_model raises InternalError naming the
    stage and the check, before lowering anything."""
    real = partition.partition

    def forgetful(*args, **kwargs):
        parts = real(*args, **kwargs)
        parts.schedule.clear()
        return parts

    monkeypatch.setattr(kc.partition, "partition", forgetful)
    with pytest.raises(InternalError, match="after the partition stage: every_op_placed_once: "):
        kc.compile_model("tiny_cnn", CompileSpec(TARGET), log=lambda line: None)
