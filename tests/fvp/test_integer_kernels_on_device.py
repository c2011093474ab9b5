"""The integer cortex_m kernels in firmware built for the Cortex-M55 (corstone-300: the Helium
paths of quantized_linear and of the convolutions, the plain C path of the others and of the
convolutions' border pixels) on the virtual platform (QEMU mps3-an547) compute what `kiln
run-host` computes, bit for bit: the model of tests/compiler/test_integer_cpu_ops.py with every
quantized op kept on the CPU, on rows of 37 pixels (two runs of 16 inside the padding, five at
the borders). And the kernels of max pooling, tables, mul, minimum, maximum, concatenation,
transpose, batch matmul and transposed convolution (the model MoreOps of the same module) in a
program for a CPU alone, on a Cortex-M55 (the batch matmul's Helium dot products) and on a
Cortex-M4 (their DSP path), bit for bit with run-host; and a transformer block with 16-bit
attention on the same two cores, whose matrix products run as the int16 batch matmul (dot16.h's
Helium and DSP paths)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from kiln import flow
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec, Int16Regions
from tests.compiler.test_integer_cpu_ops import EVERY_OP, MoreOps, Refused, TinyOps
from tests.compiler.test_precision import block

from .helpers import assert_matches_host, random_samples

pytestmark = pytest.mark.fvp


def test_integer_kernels_run_on_the_virtual_platform_as_run_host(work, builder):
    path = work / "integer_kernels.pte"
    loaded = LoadedModel("integer_kernels", TinyOps().eval(), (torch.randn(1, 3, 9, 37),))
    flow.compile_pte(loaded, CompileSpec("ethos-u55-128", exclusions=EVERY_OP), path, log=lambda line: None)
    elf = builder(path)
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(path, elf, "ethos-u55-128", random_samples(path, 3, seed=5), Path(short))


@pytest.mark.parametrize("target", ["cortex-m55", "cortex-m4"])
def test_more_integer_kernels_run_on_a_cpu_as_run_host(work, builder, target):
    path = work / f"more_integer_kernels-{target}.pte"
    loaded = LoadedModel("more_integer_kernels", MoreOps().eval(), (torch.randn(1, 3, 5, 9),))
    flow.compile_pte(loaded, CompileSpec(target), path, log=lambda line: None)
    elf = builder(path, target)
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(path, elf, target, random_samples(path, 3, seed=7), Path(short))


@pytest.mark.parametrize("target", ["cortex-m55", "cortex-m4"])
def test_int16_attention_runs_on_a_cpu_as_run_host(work, builder, target):
    path = work / f"int16_attention-{target}.pte"
    flow.compile_pte(
        block(), CompileSpec(target, int16=Int16Regions(policies=("attention",))), path, log=lambda line: None
    )
    elf = builder(path, target)
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(path, elf, target, random_samples(path, 3, seed=9), Path(short))


def test_copies_and_float_fallbacks_run_on_a_cpu_as_run_host(work, builder):
    """The model of the compiler's refusals (float mul and matrix product by a vector) and int8
    copies (select, embedding, where) on a Cortex-M4, its token ids within the table."""
    path = work / "copies-cortex-m4.pte"
    shapes = ((2, 3, 5), (2, 3, 5), (2, 5))
    example = (*(torch.randn(*s) for s in shapes), torch.tensor([[3, 0, 9, 3]]))
    flow.compile_pte(
        LoadedModel("copies", Refused().eval(), example), CompileSpec("cortex-m4"), path, log=lambda line: None
    )
    elf = builder(path, "cortex-m4")
    rng = np.random.default_rng(4)
    samples = [
        [*(rng.uniform(-1, 1, s).astype(np.float32) for s in shapes), rng.integers(0, 10, (1, 4))] for _ in range(2)
    ]
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(path, elf, "cortex-m4", samples, Path(short))
