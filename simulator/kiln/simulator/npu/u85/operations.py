"""The Ethos-U85's NPU_OP_* commands: which function runs each."""

from __future__ import annotations

from kiln.errors import NotModelled
from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.u85 import blockops, dma, elementwise, resize


def operation(ctx: Context, command: Command) -> None:
    """Runs `command` (an NPU_OP_* other than STOP) with the registers and memory of `ctx`."""
    name = command.name
    ctx.coverage.hit("opcode", name)
    if name == "NPU_OP_CONV":
        blockops.convolution(ctx, command.param)
    elif name == "NPU_OP_DEPTHWISE":
        blockops.depthwise(ctx)
    elif name == "NPU_OP_POOL":
        blockops.pooling(ctx, command.param & 7)
    elif name == "NPU_OP_ELEMENTWISE":
        elementwise.elementwise(ctx, command.param & 0x3F)
    elif name == "NPU_OP_DMA_START":
        dma.dma_start(ctx)
    elif name == "NPU_OP_RESIZE":
        resize.resize(ctx, command.param & 3)
    elif name == "NPU_OP_BRANCH":
        raise NotModelled(f"{name} is not modelled")
    # IRQ, DMA_WAIT, KERNEL_WAIT and PMU_MASK: as on the U55/U65.
