"""What `kiln run-host` runs in a kiln.isolation child for a delegate without a TOSA graph: its
command stream on kiln's NPU model. The isolation server imports this module, and forks each
child from that process: it imports the NPU model, the types of its arguments and the parts of
Vela the model reads its memory timing and AXI ports from (imported there on first use, which
would be in every child), and nothing more (torch least of all)."""

from __future__ import annotations

import ethosu.vela.architecture_features  # noqa: F401 - kiln.simulator.npu.cycles and .pmu read it
import ethosu.vela.npu_performance  # noqa: F401 - what constructing an ArchitectureFeatures imports
import numpy as np

from kiln.lower.ethosu_payload import VelaPayload
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.standalone import run_compiled


def command_stream(
    payload: VelaPayload, inputs: list[np.ndarray], config: NpuConfig, fast_scratch: int | None
) -> tuple[list[bytes], str | None]:
    """(raw bytes of each output, the fault or None) of the payload's command stream run on
    kiln's NPU model (kiln.simulator.npu.standalone.run_compiled)."""
    raw, result = run_compiled(payload, inputs, config, fast_scratch)
    return raw, None if result.fault is None else str(result.fault)
