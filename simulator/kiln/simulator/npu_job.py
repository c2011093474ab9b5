"""Files for the NPU test app (tests/fvp/apps/npu_run.cpp): one Vela-compiled job
handed to firmware through semihosting, and its output read back.

The layout is the app's contract: npu_job.bin holds 10 little-endian words ('KNPU',
payload bytes, weights bytes, scratch bytes, fast scratch bytes, input offset,
input bytes, output offset, output bytes, timeout in ms or 0 for the driver's default); npu_cmd.bin, npu_weights.bin and
npu_input.bin hold the data; the app writes npu_output.bin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kiln.simulator.npu.compiled import CompiledNpuProgram, tensor_bytes

JOB_MAGIC = 0x55504E4B  # "KNPU"
APP = "kiln_test_npu_run"
OUTPUT = "npu_output.bin"


def write_job(directory: Path, vela: CompiledNpuProgram, data: bytes, cmd: bytes | None = None, timeout_ms: int = 0):
    """Writes the job files for `vela` (a compiled NPU program with one input and one output,
    and its fast_scratch_size) with input bytes `data` and, if given, `cmd` instead of vela.cmd_data;
    `timeout_ms` bounds the driver's wait for the NPU (0: its default)."""
    if len(vela.inputs) != 1 or len(vela.outputs) != 1:
        raise ValueError(
            f"the NPU test app runs one input and one output; this job has {len(vela.inputs)} and {len(vela.outputs)}"
        )
    (inp,), (out,) = vela.inputs, vela.outputs
    if len(data) != tensor_bytes(inp):
        raise ValueError(f"input of {len(data)} bytes for a tensor of {tensor_bytes(inp)}")
    cmd = vela.cmd_data if cmd is None else cmd
    words = [
        JOB_MAGIC,
        len(cmd),
        len(vela.weight_data),
        vela.scratch_size,
        vela.fast_scratch_size,
        inp.offset,
        len(data),
        out.offset,
        tensor_bytes(out),
        timeout_ms,
    ]
    directory = Path(directory)
    (directory / "npu_job.bin").write_bytes(np.array(words, dtype="<u4").tobytes())
    (directory / "npu_cmd.bin").write_bytes(cmd)
    (directory / "npu_weights.bin").write_bytes(vela.weight_data)
    (directory / "npu_input.bin").write_bytes(data)
