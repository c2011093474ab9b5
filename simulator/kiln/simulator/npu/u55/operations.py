"""The Ethos-U55/U65's NPU_OP_* commands: which function runs each. They work everything out
when they run: prepare (kiln.simulator.npu.prepared) defers the whole operation."""

from __future__ import annotations

import functools

from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.prepared import Run
from kiln.simulator.npu.u55.blockops import convolution, depthwise, pooling
from kiln.simulator.npu.u55.dma import dma_start
from kiln.simulator.npu.u55.elementwise import elementwise


def prepare(ctx: Context, command: Command) -> Run:
    """`command` (an NPU_OP_* other than STOP), to run with the registers of the Context it runs in."""
    return functools.partial(operation, command=command)


def operation(ctx: Context, command: Command) -> None:
    """Runs `command` (an NPU_OP_* other than STOP) with the registers and memory of `ctx`."""
    name = command.name
    if name == "NPU_OP_CONV":
        convolution(ctx)
    elif name == "NPU_OP_DEPTHWISE":
        depthwise(ctx)
    elif name == "NPU_OP_POOL":
        pooling(ctx, command.param)
    elif name == "NPU_OP_ELEMENTWISE":
        elementwise(ctx, command.param)
    elif name == "NPU_OP_DMA_START":
        dma_start(ctx)
    # IRQ, DMA_WAIT, KERNEL_WAIT and PMU_MASK only order or signal work, and this model
    # completes every operation before the next command.
