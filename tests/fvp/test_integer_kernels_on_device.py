"""The integer cortex_m kernels in firmware built for the Cortex-M55 (corstone-300: the Helium
paths of quantized_linear and of the convolutions, the plain C path of the others and of the
convolutions' border pixels) on the virtual platform (QEMU mps3-an547) compute what `kiln
run-host` computes, bit for bit: the model of tests/compiler/test_integer_cpu_ops.py with every
quantized op kept on the CPU, on rows of 37 pixels (two runs of 16 inside the padding, five at
the borders)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from kiln import flow
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec
from tests.compiler.test_integer_cpu_ops import EVERY_OP, TinyOps

from .helpers import assert_matches_host, random_samples

pytestmark = pytest.mark.fvp


def test_integer_kernels_run_on_the_virtual_platform_as_run_host(work, builder):
    path = work / "integer_kernels.pte"
    loaded = LoadedModel("integer_kernels", TinyOps().eval(), (torch.randn(1, 3, 9, 37),))
    flow.compile_pte(loaded, CompileSpec("ethos-u55-128", exclusions=EVERY_OP), path, log=lambda line: None)
    elf = builder(path)
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(path, elf, "ethos-u55-128", random_samples(path, 3, seed=5), Path(short))
