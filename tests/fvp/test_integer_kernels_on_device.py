"""The integer cortex_m kernels in firmware compute what `kiln run-host` computes, bit for bit
(run-host: kiln.program.kernels.integer's numpy, independent of the firmware), on the virtual
platform:

- TinyOps (tests/compiler/test_integer_cpu_ops.py) with every quantized op kept on the CPU, in
  firmware for the Cortex-M55 (corstone-300), on rows of 37 pixels;
- KernelPaths below, in each code path of the kernels (firmware/runtime/kernels/dot.h) on its
  core: Helium on the Cortex-M55 (QEMU mps3-an547), the DSP extension on the Cortex-M4
  (mps2-an386), and the plain C paths (the firmware's KILN_KERNELS_PLAIN) on the Cortex-M55: odd
  sizes, channel counts that are no multiple of 16 (or of the 4 pixels and 2 channels a block
  takes), windows of several 16-byte pieces and a tail, strides, dilation, groups, a depthwise
  multiplier of 2, a long softmax row (the table path) and a short one, and int8 inputs over
  their whole range with weights that push the requantization's multipliers and shifts to
  their extremes;
- the kernels of max pooling, tables, mul, minimum, maximum, concatenation, transpose, batch
  matmul and transposed convolution (the model MoreOps of the same module) in a program for a
  CPU alone, on a Cortex-M55 (the batch matmul's Helium dot products) and on a Cortex-M4 (their
  DSP path);
- a transformer block with 16-bit attention on the same two cores, whose matrix products run as
  the int16 batch matmul (dot16.h's Helium and DSP paths);
- S16Ops (tests/compiler/test_integer_cpu_ops.py: int16 convolution, depthwise convolution of
  multiplier 2, max and average pools, mul, int16 and int8 means) in each code path as KernelPaths;
- the compiler's refusals (float fallbacks) and int8 copies on a Cortex-M4."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from kiln import flow
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec, Int16Regions
from tests.compiler.test_integer_cpu_ops import EVERY_OP, S16_SPEC, MoreOps, Refused, S16Ops, TinyOps
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


class KernelPaths(torch.nn.Module):
    """Convolutions of windows of 45 (2 pieces and a tail), 19, 54 and 27 bytes, 19, 21, 6, 9 and
    18 output channels; a 3x5 depthwise of stride 2, a 3x3 depthwise of multiplier 2 on rows of
    7 pixels, and one of 19 channels on rows of 13 (a step of 8 pixels and a tail of 5) padded
    along its rows only; global and strided average pools; linear layers of 163 -> 23, 23 -> 300,
    23 -> 7 and 3 -> 5 features (no whole word of input); softmaxes over 300 and 7 values.
    conv1's weights are scaled by 200 (a requantization multiplier near 2^-31's end), dw's by
    1e-3 (a large right shift), dw_rows's by 40. The branch from conv1's output reaches the band
    path's other cases (quantized_conv.cpp): a 3x3 of 21 channels whose band of input rows takes
    several passes (expand), pointwise convolutions of 32 and 16 channels (whole 16-byte pieces,
    8-channel gathers), a 3x3 of 16 channels at stride 2 (whole pieces straight from the band, 7
    output channels: a last odd one), and a 3x3 of 80 channels whose band holds a strip of the
    row's columns at a time (strips)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv3 = torch.nn.Conv2d(5, 19, 3, padding=1)
        self.conv1 = torch.nn.Conv2d(19, 21, 1)
        self.strided = torch.nn.Conv2d(21, 6, 3, stride=2, padding=2, dilation=2)
        self.grouped = torch.nn.Conv2d(6, 9, 3, padding=1, groups=3)
        self.dw = torch.nn.Conv2d(9, 18, 3, padding=1, groups=9)
        self.dw_wide = torch.nn.Conv2d(18, 18, (3, 5), stride=2, padding=(1, 2), groups=18)
        self.fc = torch.nn.Linear(18 * 3 * 3 + 1, 23)
        self.head = torch.nn.Linear(23, 300)
        self.small = torch.nn.Linear(23, 7)
        self.dw_rows = torch.nn.Conv2d(19, 19, 3, padding=(0, 1), groups=19)
        self.tiny = torch.nn.Linear(3, 5)
        self.expand = torch.nn.Conv2d(21, 32, 3, padding=1)
        self.point = torch.nn.Conv2d(32, 16, 1)
        self.taps16 = torch.nn.Conv2d(16, 7, 3, stride=2, padding=1)
        self.widen = torch.nn.Conv2d(16, 80, 1)
        self.strips = torch.nn.Conv2d(80, 3, 3, padding=1)
        with torch.no_grad():
            self.conv1.weight *= 200.0
            self.dw.weight *= 1e-3
            self.dw_rows.weight *= 40.0

    def forward(self, x):
        """Every layer's output is an output of the program: an error in any kernel shows."""
        a = torch.relu(self.conv3(x))
        b = self.conv1(a)
        c = torch.relu(self.strided(b))
        d = self.grouped(c)
        e = self.dw(d)
        f = self.dw_wide(e)
        pooled = torch.nn.functional.adaptive_avg_pool2d(f, 1).flatten(1)[:, :1]
        g = torch.nn.functional.avg_pool2d(f, 2, stride=1).flatten(1)
        h = torch.relu(self.fc(torch.cat([g, pooled], 1)))
        wide = torch.relu(self.expand(b))
        point = self.point(wide)
        return (
            *(a, b, c, d, e, f, g, h, torch.softmax(self.head(h), -1), torch.softmax(self.small(h), -1)),
            *(self.dw_rows(a), self.tiny(h[:, :3])),
            *(wide, point, self.taps16(point), self.strips(torch.relu(self.widen(point)))),
        )


PATHS = {  # code path: (target, the firmware's CMake options)
    "helium": ("cortex-m55", ("-DKILN_KERNELS_PLAIN=OFF",)),
    "dsp": ("cortex-m4", ("-DKILN_KERNELS_PLAIN=OFF",)),
    "plain": ("cortex-m55", ("-DKILN_KERNELS_PLAIN=ON",)),
}
INTEGER_OPS = {"conv2d", "linear", "avg_pool2d", "adaptive_avg_pool2d", "softmax"}


@pytest.mark.parametrize("path", PATHS)
def test_each_code_path_computes_what_run_host_computes(work, tmp_path, path):
    target, options = PATHS[path]
    pte = work / f"kernel_paths-{target}.pte"
    loaded = LoadedModel("kernel_paths", KernelPaths().eval(), (torch.randn(1, 5, 15, 13),))
    result, _ = flow.compile_pte(loaded, CompileSpec(target, io="int8"), pte, log=lambda line: None)
    kernels = result.program.cpu_kernels
    assert all(k["arithmetic"] == "integer" for name, k in kernels.items() if name.rstrip("_0123456789") in INTEGER_OPS)
    assert sum(k["kernel"] == "cortex_m::quantized_conv2d" for k in kernels.values()) == 9, kernels
    elf = flow.build_runner(
        pte, target, output=work / f"kernel_paths-{path}", echo=lambda *a, **k: None, cmake_options=options
    )
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(pte, elf, target, random_samples(pte, 4, seed=17), Path(short))


@pytest.mark.parametrize("path", PATHS)
def test_s16_kernels_and_means_in_each_code_path_compute_what_run_host_computes(work, tmp_path, path):
    target, options = PATHS[path]
    pte = work / f"s16_ops-{target}.pte"
    loaded = LoadedModel("s16_ops", S16Ops().eval(), (torch.randn(1, 3, 9, 13),))
    spec = CompileSpec(target, int16=S16_SPEC.int16)
    result, _ = flow.compile_pte(loaded, spec, pte, log=lambda line: None)
    kernels = {k["kernel"] for k in result.program.cpu_kernels.values()}
    assert {"cortex_m::quantized_conv2d_s16", "cortex_m::quantized_mean", "cortex_m::quantized_mul_s16"} <= kernels
    elf = flow.build_runner(
        pte, target, output=work / f"s16_ops-{path}", echo=lambda *a, **k: None, cmake_options=options
    )
    with tempfile.TemporaryDirectory(prefix="k") as short:
        assert_matches_host(pte, elf, target, random_samples(pte, 3, seed=19), Path(short))


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
