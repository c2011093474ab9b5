"""The Ethos-U85's NPU_OP_* commands: which function runs each, and which are prepared once per
recorded command (kiln.simulator.npu.prepared): NPU_OP_CONV, NPU_OP_DEPTHWISE, NPU_OP_POOL and
NPU_OP_ELEMENTWISE; the others work everything
out when they run."""

from __future__ import annotations

import functools

from kiln.errors import NotModelled
from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.prepared import Run
from kiln.simulator.npu.u85 import blockops, dma, elementwise, resize


def prepare(ctx: Context, command: Command) -> Run:
    """`command` (an NPU_OP_* other than STOP) prepared with the registers of `ctx`."""
    if command.name == "NPU_OP_ELEMENTWISE":
        return elementwise.prepare(ctx, command.param & 0x3F)
    if command.name == "NPU_OP_POOL":
        return blockops.prepare_pooling(ctx, command.param & 7)
    if command.name == "NPU_OP_CONV":
        return blockops.prepare_convolution(ctx, command.param)
    if command.name == "NPU_OP_DEPTHWISE":
        return blockops.prepare_depthwise(ctx)
    return functools.partial(operation, command=command)


def operation(ctx: Context, command: Command) -> None:
    """Runs `command` (NPU_OP_DMA_START, RESIZE, BRANCH or a wait) with the registers and memory of `ctx`."""
    name = command.name
    if name == "NPU_OP_DMA_START":
        dma.dma_start(ctx)
    elif name == "NPU_OP_RESIZE":
        resize.resize(ctx, command.param & 3)
    elif name == "NPU_OP_BRANCH":
        raise NotModelled(f"{name} is not modelled")
    # IRQ, DMA_WAIT, KERNEL_WAIT and PMU_MASK: as on the U55/U65.
