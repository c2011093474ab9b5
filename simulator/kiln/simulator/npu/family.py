"""The NPU families kiln models, one object each: what running a command stream of that family
takes. family_of picks it from an NpuConfig (the Ethos-U65 runs the Ethos-U55's streams).

    family      registers     opcodes              operations          cycle estimate
    U55 (U65)   u55/registers u55/commands         u55/operations      u55/cycles
    U85         u85/registers u85/commands         u85/operations      u85/cycles

What both families share is in kiln.simulator.npu itself (decoding, Context, the IFM window
and sums, the output stage's scaling, memory timing)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.simulator.npu.commands import Command, CommandSet
from kiln.simulator.npu.config import PRODUCT_U55, PRODUCT_U65, PRODUCT_U85, NpuConfig
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.coverage import U85 as U85_COVERAGE
from kiln.simulator.npu.cycles import CycleModel
from kiln.simulator.npu.prepared import Run
from kiln.simulator.npu.registers import Registers
from kiln.simulator.npu.u55 import operations as u55_operations
from kiln.simulator.npu.u55.commands import U55_COMMANDS
from kiln.simulator.npu.u55.cycles import U55CycleModel
from kiln.simulator.npu.u55.registers import U55Registers
from kiln.simulator.npu.u85 import operations as u85_operations
from kiln.simulator.npu.u85.commands import U85_COMMANDS
from kiln.simulator.npu.u85.cycles import U85CycleModel
from kiln.simulator.npu.u85.registers import U85Registers


@dataclass(frozen=True, eq=False)
class Family:
    """One NPU family."""

    name: str  # for messages, e.g. "Ethos-U55/U65"
    commands: CommandSet  # its opcodes
    registers: Callable[[], Registers]  # a fresh register file (every register 0, as after reset)
    prepare: Callable[[Context, Command], Run]  # one NPU_OP_* command but STOP, prepared (npu.prepared)
    cycle_model: Callable[[NpuConfig], CycleModel]  # a fresh estimate for one run
    coverage: str  # put before its runs' coverage categories (kiln.simulator.npu.coverage)


U55 = Family(
    "Ethos-U55/U65",
    U55_COMMANDS,
    U55Registers,
    u55_operations.prepare,
    U55CycleModel,
    "",
)
U85 = Family(
    "Ethos-U85",
    U85_COMMANDS,
    U85Registers,
    u85_operations.prepare,
    U85CycleModel,
    U85_COVERAGE,
)
FAMILIES = {PRODUCT_U55: U55, PRODUCT_U65: U55, PRODUCT_U85: U85}


def family_of(config: NpuConfig) -> Family:
    """The family of `config`'s NPU."""
    return FAMILIES[config.product]
