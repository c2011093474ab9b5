"""corstone-320 firmware (Cortex-M85) on kiln's virtual platform: QEMU mps3-an547 runs the very
ELF, booted at the SSE-320's boot ROM address; run_fvp.sh chooses it for ethos-u85 targets when
no FVP_Corstone_SSE-320 is installed."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from kiln import compile as kiln_compile
from kiln import flow
from kiln.frontend.export import LoadedModel
from kiln.lower import ethosu_payload as ep
from kiln.models import MODELS
from kiln.pte.reader import deserialize
from kiln.simulator import run
from kiln.spec import CompileSpec
from tests.firmware.runtime import npu_hostile as nh

from .helpers import assert_matches_host, compiled, random_samples

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.fvp

# What firmware/apps/hello prints by design on corstone-320 (its board name and CPU core, and
# sums worked out by hand).
HELLO = [
    "Hello from kiln on corstone-320 (cortex-m85)",
    "startup: .data 42, .bss 0, static constructor 43",
    "Helium: sum of squares 1..16 = 1496",
    "FPU: 1.5 * 1.5 * 100 = 225",
    "[kiln] exit 0",
]


@pytest.mark.skipif(shutil.which("FVP_Corstone_SSE-320") is not None, reason="an FVP is installed: run_fvp.sh runs it")
def test_hello_for_ethos_u85_runs_on_the_virtual_platform(corstone320_build):
    elf = corstone320_build / "hello.elf"
    result = subprocess.run(
        [str(ROOT / "scripts" / "run_fvp.sh"), f"--elf={elf}", "--target=ethos-u85-256"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == HELLO
    assert "on kiln's virtual platform (QEMU mps3-an547" in result.stderr


def test_hello_boots_at_the_boot_rom_without_the_npu_model(corstone320_build):
    """Without the NPU model there is no NPU attachment, yet the CPU still boots at 0x1100_0000
    (QEMU's mps3-an547 itself reads its vectors at 0x1000_0000, where this ELF has none)."""
    fw = flow.firmware(corstone320_build / "hello.elf", "ethos-u85-128")
    result = flow.run(fw, "virtual", 60, note=lambda text: None, npu_model=False)
    assert result.status == 0 and result.uart == HELLO


def test_a_delegated_program_for_ethos_u85_equals_run_host_bit_for_bit(work, builder, tmp_path):
    """digits compiled for ethos-u85-256 and built for corstone-320 through build_executor_runner.sh
    (its code and vectors in the boot ROM): on the virtual platform the driver runs its U85
    command stream on the NPU model, and the outputs equal run-host's bit for bit."""
    pte_path = compiled(work, "digits", "ethos-u85-256")
    elf = builder(pte_path, "ethos-u85-256")
    sections = subprocess.run(
        ["arm-none-eabi-readelf", "-S", "-W", str(elf)], capture_output=True, text=True, check=True
    ).stdout
    (text,) = [line.split() for line in sections.splitlines() if " .text " in line]
    assert text[text.index(".text") + 2] == "11000000"  # the boot ROM (boards/corstone-320/board.toml)
    result = assert_matches_host(pte_path, elf, "ethos-u85-256", random_samples(pte_path, 2, seed=320), tmp_path)
    assert all(cycles > 0 for cycles in result.npu_cycles)  # each inference ran an NPU stream


# The zoo but digits (above) and the MobileNetV2s, which the suite's time budget leaves to a manual run
# (all 21 zoo and architecture models measured equal at u85-256 on 2026-11-26).
U85_ZOO = [m for m in MODELS if m not in ("digits", "mobilenet_v2", "mobilenet_v2_035")]


@pytest.mark.parametrize("model", U85_ZOO)
def test_zoo_model_for_ethos_u85_equals_run_host_bit_for_bit(work, builder, tmp_path, model):
    """A zoo model compiled for ethos-u85-256 and built for corstone-320 runs on the virtual
    platform with outputs equal to run-host's."""
    pte_path = compiled(work, model, "ethos-u85-256")
    assert_matches_host(
        pte_path, builder(pte_path, "ethos-u85-256"), "ethos-u85-256", random_samples(pte_path, 1, seed=85), tmp_path
    )


def test_vit_tiny_for_ethos_u85_with_matmuls_on_the_npu_equals_run_host_bit_for_bit(work, builder, tmp_path):
    """vit_tiny compiled for ethos-u85-256 and built for corstone-320: its attention's matmuls are
    CONVs with their weights in IFM2 (NPU_OP_CONV parameter bit 0), which the driver's bounds check
    bounds at delegate init; on the virtual platform the delegate binds, runs on the NPU model and
    its outputs equal run-host's bit for bit."""
    pte_path = compiled(work, "vit_tiny", "ethos-u85-256")
    f = deserialize(pte_path.read_bytes())
    (delegate,) = f.program.execution_plans[0].delegates
    words = np.frombuffer(ep.decode(f.delegate_payload(delegate)).cmd_data, "<u4")
    matmuls = [
        i
        for i, op, payload in nh.commands(words, *nh.stream_span(words.tobytes()))
        if not payload and op == nh.NPU_OP_CONV and (int(words[i]) >> 16) & 1
    ]
    assert len(matmuls) >= 2
    result = assert_matches_host(
        pte_path, builder(pte_path, "ethos-u85-256"), "ethos-u85-256", random_samples(pte_path, 2, seed=320), tmp_path
    )
    assert all(cycles > 0 for cycles in result.npu_cycles)


class SelectByMask(torch.nn.Module):
    """A convolution, a comparison of two tensors and a select, the mask also a program output; any()
    of another mask; the convolution's argmax over channels (int32 on the NPU, int64 for
    PyTorch) and a constant index_select of its channels; an embedding of int64 tokens (checked
    and narrowed to int32 on the CPU, gathered on the NPU)."""

    TOKENS = 20

    def __init__(self):
        super().__init__()
        torch.manual_seed(85)
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.embed = torch.nn.Embedding(self.TOKENS, 8)

    def forward(self, x, y, tokens):
        h = self.conv(x)
        mask = h > y
        return (
            torch.where(mask, h, y * 0.5),
            mask,
            h.argmax(dim=1),
            (h < -0.5).any(dim=1),
            torch.index_select(h, 1, torch.tensor([7, 0, 3])),
            self.embed(tokens) * 2.0,
        )


def test_comparison_select_argmax_and_gathers_on_the_u85_equal_run_host(work, builder, tmp_path):
    """On Ethos-U85 the comparison, select, any, argmax and gathers run on the NPU (whose true is
    -1 inside a stream); the bool masks leave the delegate as PyTorch's 0 and 1, the indices as
    int32 that a CPU cast widens: outputs equal run-host's bit for bit."""

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return (
            torch.rand(1, 4, 8, 8, generator=g) * 2 - 1,
            torch.rand(1, 8, 8, 8, generator=g) * 2 - 1,
            torch.randint(0, SelectByMask.TOKENS, (1, 6), generator=g),
        )

    result = kiln_compile.compile_model(
        LoadedModel("select_by_mask", SelectByMask().eval(), inputs(0)), CompileSpec("ethos-u85-256")
    )
    on_cpu = {p.op.op_type for p in result.partitioning.placements if p.partition is None}
    assert on_cpu == {
        "quantized_decomposed.quantize_per_tensor",
        "quantized_decomposed.dequantize_per_tensor",
        "aten._to_copy",
        "kiln.checked_index",
    }, on_cpu
    pte_path = work / "select_by_mask-ethos-u85-256.pte"
    kiln_compile.write(result, pte_path)
    elf = builder(pte_path, "ethos-u85-256")
    samples = [[t.numpy() for t in inputs(seed)] for seed in (85, 86)]
    assert_matches_host(pte_path, elf, "ethos-u85-256", samples, tmp_path)


def test_a_cpu_only_program_equals_run_host_bit_for_bit(work, builder, tmp_path):
    """vit_tiny with every op on the CPU: the clang-built Cortex-M85 runtime and kernels, run on
    the virtual platform, give run-host's outputs bit for bit."""
    pte_path = compiled(work, "vit_tiny", "ethos-u85-256", delegate=False)
    assert_matches_host(
        pte_path, builder(pte_path, "ethos-u85-256"), "ethos-u85-256", random_samples(pte_path, 2, seed=85), tmp_path
    )


def test_a_qemu_machine_the_virtual_platform_does_not_know_is_a_board_error(tmp_path):
    import dataclasses

    from kiln import boards
    from kiln.errors import BoardError

    target = boards.target("ethos-u85-256")
    elsewhere = dataclasses.replace(target, board=dataclasses.replace(target.board, qemu_machine="mps2-an521"))
    known = "mps3-an547, mps2-an386, mps2-an500, mps2-an505"  # the boards' QEMU machines (boards/*/board.toml)
    with pytest.raises(BoardError, match=f"does not know QEMU machine 'mps2-an521' \\(known: {known}\\)"):
        run.virtual_platform(elsewhere, tmp_path / "firmware.elf", npu_model=False)
