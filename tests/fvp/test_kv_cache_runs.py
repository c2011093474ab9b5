"""A KV cache's update on the virtual platform: a decode step (tests/compiler/cache_updates.py's
Decode: a key projected and written at a run-time position of a [1, 3, 16, 8] cache, the cache
then read by a max) compiled for ethos-u85-256, where the write is Vela's SCATTER (a DMA copy of
the cache, then the DMA's indexed mode writing one row into each of the 3 planes). Kiln's executor
runner on the virtual platform runs it on kiln's U85 model and must give `kiln run-host`'s outputs
bit for bit (run-host: tosa_reference_model and numpy kernels, independent of the firmware) at
positions 0, 9 and 15; a position past the cache is the firmware's error, never a write."""

from __future__ import annotations

import pytest
import torch

from kiln import flow
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec
from tests.compiler.cache_updates import Decode, T, make

from .helpers import assert_matches_host

pytestmark = pytest.mark.fvp
TARGET = "ethos-u85-256"
EXIT_INFERENCE = 6  # firmware/apps/executor_runner/runner.h


@pytest.fixture(scope="module")
def decode(work, builder):
    """(the .pte, its runner) of Decode for ethos-u85-256, its index_copy in the NPU's delegate."""
    path = work / "kv_cache_decode-ethos-u85-256.pte"
    torch.manual_seed(5)
    model = LoadedModel("decode", Decode().eval(), make("decode", 7, 0))
    result, _ = flow.compile_pte(model, CompileSpec(TARGET), path, log=lambda line: None)
    (placement,) = [p for p in result.partitioning.placements if p.op.op_type == "aten.index_copy"]
    assert placement.partition is not None
    return path, builder(path, TARGET)


def test_the_npu_models_scatter_equals_run_host_bit_for_bit(decode, tmp_path):
    path, elf = decode
    samples = [[t.numpy() for t in make("decode", position, seed)] for seed, position in enumerate((0, 9, T - 1))]
    assert_matches_host(path, elf, TARGET, samples, tmp_path)


def test_a_position_past_the_cache_is_the_firmwares_error(decode, tmp_path):
    """Position 16 of a 16-row cache: kiln::checked_index's kernel, which runs before the delegate,
    refuses it, naming its argument (0, the index tensor) and the index: the NPU never runs."""
    path, elf = decode
    result = flow.infer(elf, TARGET, path, [[t.numpy() for t in make("decode", T, 3)]], tmp_path, platform="virtual")
    assert result.status == EXIT_INFERENCE, result.log
    assert f"inference failed: kernel: bad argument (a=0, b={T})" in result.run.uart, result.log
    assert result.run.npu_summary.startswith("NPU model: 0 stream(s)"), result.log
