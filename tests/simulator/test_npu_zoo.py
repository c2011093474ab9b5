"""Every zoo model's NPU delegate, compiled by Vela, run on kiln's NPU model and compared
bit for bit with tosa_reference_model on the same TOSA graph (random int8 inputs)."""

from __future__ import annotations

import pytest

from kiln import boards
from kiln.compile import compile_model
from kiln.lower.vela import compile_tosa
from kiln.spec import CompileSpec
from tests.simulator import helpers

OTHER_TARGETS = {
    "ethos-u55-32": ["ds_cnn", "resnet8"],
    "ethos-u55-64": ["tiny_cnn", "fc_autoencoder"],
    "ethos-u55-256": ["mobilenet_v1_025", "digits"],
    "ethos-u65-256": ["ds_cnn", "mobilenet_v2_035"],
    "ethos-u65-512": ["resnet8", "mobilenet_v1_025", "digits"],
}


@pytest.mark.parametrize("model", helpers.ZOO)
def test_zoo_delegates_bit_exact_u55_128(model):
    result, shapes = helpers.compiled_zoo(model)
    assert result.tosa
    for tosa, vela, part_shapes in zip(result.tosa, result.vela, shapes):
        helpers.assert_bit_exact(tosa, vela, part_shapes, "ethos-u55-128")


@pytest.mark.parametrize("target, model", [(t, m) for t, models in OTHER_TARGETS.items() for m in models])
def test_zoo_delegates_bit_exact_other_targets(target, model):
    result, shapes = helpers.compiled_zoo(model)
    for i, (tosa, part_shapes) in enumerate(zip(result.tosa, shapes)):
        vela = compile_tosa(tosa, f"{model}{i}", target, helpers.system_config(target), helpers.memory_mode(target))
        helpers.assert_bit_exact(tosa, vela, part_shapes, target)


@pytest.mark.parametrize("model", ["tiny_cnn", "resnet8"])
def test_zoo_delegates_lowered_for_u65_bit_exact(model):
    """Lowered for ethos-u65-256 (rank-4 TRANSPOSEs, kiln.families.RANK4_TRANSPOSES) and
    run on that configuration."""
    result = compile_model(model, CompileSpec(target="ethos-u65-256"))
    shapes = [[tuple(v.shape) for v in part.inputs] for part in result.partitioning.partitions]
    for tosa, vela, part_shapes in zip(result.tosa, result.vela, shapes):
        helpers.assert_bit_exact(tosa, vela, part_shapes, "ethos-u65-256")


CHOICES_MET = {
    "tiny_cnn": {"pooled_means"},
    "tc_resnet8": {"pooled_means", "rank4_transposes"},
    "kwt": {"fused_exps", "rank4_transposes"},
}


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
@pytest.mark.parametrize("model", list(CHOICES_MET))
def test_every_lowering_choice_bit_exact(model, target):
    """The graphs compile_model weighs (kiln.compile.fastest: the target's first guess, each
    choice flipped, such as rank-4 TRANSPOSEs on Ethos-U55) and the one it kept, run as Vela
    compiles each for that family."""
    from kiln.lower import tosa as tosa_lowering

    result = compile_model(model, CompileSpec(target=target))
    spec = CompileSpec(target=target).resolved()
    met = set()
    for part, kept, kept_flipped in zip(result.program.delegates, result.tosa, result.flipped):
        shapes = [tuple(v.shape) for v in part.inputs]
        first, choices = tosa_lowering.lower_noting_choices(part, boards.target(target).npu)
        met |= choices
        graphs = {first: frozenset()}  # TOSA -> its flipped choices, each distinct graph once
        graphs.setdefault(kept, kept_flipped)
        for c in sorted(choices):
            graphs.setdefault(tosa_lowering.lower(part, boards.target(target).npu, frozenset({c})), frozenset({c}))
        for tosa, flipped in graphs.items():
            vela = compile_tosa(tosa, f"{model}_{sorted(flipped)}", target, spec.system_config, spec.memory_mode)
            helpers.assert_bit_exact(tosa, vela, shapes, target)
    assert met == CHOICES_MET[model]  # every choice there is, each form of it checked somewhere
