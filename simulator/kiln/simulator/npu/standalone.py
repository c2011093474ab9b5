"""A compiled NPU program run on the model in host memory, without a CPU or QEMU: the
regions as Python buffers at fixed bus addresses. For tests and benchmarks that check a
command stream on its own (the virtual platform maps the firmware's real memory instead)."""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.compiled import CompiledNpuProgram
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.executor import ExecResult, run_stream
from kiln.simulator.npu.memory import FlatMemory

# Bus addresses of regions 0 (weights), 1 (scratch), 2 (fast scratch); any distinct,
# non-overlapping values do.
REGION_BASES = (0x1000_0000, 0x2000_0000, 0x3000_0000, 0, 0, 0, 0, 0)


def run_compiled(
    compiled: CompiledNpuProgram,
    inputs: list[np.ndarray],
    config: NpuConfig,
    fast_scratch_size: int | None = None,
    bases: tuple[int, ...] = REGION_BASES,
) -> tuple[list[bytes], ExecResult]:
    """(raw bytes of each output, ExecResult) of `compiled` run on `inputs` (one array per
    compiled.inputs, its bytes as the NPU takes them). `compiled` has the attributes of
    kiln.simulator.npu.compiled.CompiledNpuProgram, and fast_scratch_size if it has one;
    `fast_scratch_size` (bytes) overrides it. `bases`: the 8 regions' bus addresses (regions 0
    to 2 distinct and apart by more than their sizes)."""
    fast = fast_scratch_size if fast_scratch_size is not None else getattr(compiled, "fast_scratch_size", 0) or 0
    regions = {
        0: bytearray(compiled.weight_data),  # nothing past it: a read there faults
        1: bytearray(max(compiled.scratch_size, 16)),
        2: bytearray(max(fast, 16)),
    }
    memory = FlatMemory({bases[r]: buf for r, buf in regions.items()})
    for tensor, value in zip(compiled.inputs, inputs):
        raw = np.ascontiguousarray(value).tobytes()
        if len(raw) != int(np.prod(tensor.shape)) * tensor.elem_size:
            raise ValueError(f"an input of {len(raw)} bytes for NPU tensor {tensor}")
        regions[tensor.region][tensor.offset : tensor.offset + len(raw)] = raw
    result = run_stream(parse_cop1(compiled.cmd_data).stream, bases, memory, config)
    outputs = [
        bytes(regions[t.region][t.offset : t.offset + int(np.prod(t.shape)) * t.elem_size]) for t in compiled.outputs
    ]
    return outputs, result
