"""MLPerf Tiny's models of the zoo (ds_cnn, mobilenet_v1_025, resnet8, fc_autoencoder) and digits,
compiled by kiln for a CPU alone (--target cortex-m55, cortex-m7, cortex-m4: the integer cortex_m
kernels where they take an op, else float between a dequantize and a quantize) and run on each
CPU's QEMU machine: the outputs equal `kiln run-host`'s bit for bit (numpy kernels, independent
of the firmware) and lie within one output quantization step of the PT2E reference: the
quantized module kiln's compile made (torchao's convert_pt2e), run in PyTorch with its float ops
in float64 (tests.compiler.helpers.Float64Arithmetic). One random sample per model and CPU; each
inference's instructions are counted (docs/cpu-targets.md lists them)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from kiln import compile as kc
from kiln.spec import CompileSpec
from tests.compiler.helpers import Float64Arithmetic, output_scales, steps_off

from .helpers import compiled, random_samples
from .test_cpu_targets import check_cpu_run

pytestmark = pytest.mark.fvp

MODELS = ["ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder", "digits"]
CPUS = ["cortex-m55", "cortex-m7", "cortex-m4"]


@functools.cache
def pt2e(model: str) -> torch.fx.GraphModule:
    """The PT2E-quantized module of `model` as kiln's compile for a CPU makes it (the quantizer does
    not depend on which CPU: the programs of the three are the same bytes, checked below)."""
    return kc.compile_model(model, CompileSpec("cortex-m55"), log=lambda line: None).quantized_module


@pytest.mark.parametrize("target", CPUS)
@pytest.mark.parametrize("model", MODELS)
def test_runs_on_the_cpu_as_run_host_and_within_a_step_of_pt2e(work, builder, tmp_path, model, target):
    pte_path = compiled(work, model, target)
    assert pte_path.read_bytes() == compiled(work, model, CPUS[0]).read_bytes()
    samples = random_samples(pte_path, 1, seed=23)
    result = check_cpu_run(builder(pte_path, target), target, pte_path, samples, tmp_path)
    module = pt2e(model)
    for sample, outputs in zip(samples, result.outputs, strict=True):
        with torch.no_grad():
            want = Float64Arithmetic(module).run(*(torch.from_numpy(x) for x in sample))
        want = want if isinstance(want, (tuple, list)) else (want,)
        for got, w, scale in zip(outputs, want, output_scales(module), strict=True):
            off = steps_off(got, w, scale)
            assert off.max() <= 1, f"{model} on {target}: {int(off.max())} steps off PT2E at {np.argmax(off)}"
    print(f"{model} {target}: {result.cpu_instructions[0]:,} instructions per inference")
