"""kiln's functional model of the Arm Ethos-U55/U65 and Ethos-U85 NPUs: what both families share
here, each family's own parts in u55/ and u85/ (kiln.simulator.npu.family lists them);
run_stream picks the family from the NpuConfig."""

from kiln.simulator.npu.cop1 import Cop1, Cop1Error, parse_cop1
from kiln.simulator.npu.executor import ExecResult, NpuFault, run_stream
from kiln.simulator.npu.memory import FlatMemory, Memory, MemoryFault

__all__ = [
    "Cop1",
    "Cop1Error",
    "ExecResult",
    "FlatMemory",
    "Memory",
    "MemoryFault",
    "NpuFault",
    "parse_cop1",
    "run_stream",
]
