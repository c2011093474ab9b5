"""Ethos-U85 command words: the opcodes of its command stream (Vela 5.2.0's
ethos_u85_interface.hpp, cmd0_opcode and cmd1_opcode).

The word format is the Ethos-U55/U65's (kiln.simulator.npu.commands): opcode in bits
9..0, payload size in bits 15..14, a 16-bit parameter in bits 31..16, and one payload
word after a cmd1 header. Names drop the NPU_SET_ prefix as the U55/U65 tables do; the
same name means the same register on both families, though some fields differ
(kiln.simulator.npu.u85.registers). Addresses are 40 bits: a cmd1 address's parameter
holds bits 39..32 in its low byte. 63 cmd0 and 48 cmd1 opcodes: the U55/U65's less GONE,
plus NEW_CMD0/NEW_CMD1 (the U55 opcodes kept have the same numbers on the U85).
"""

from __future__ import annotations

from kiln.simulator.npu.commands import CommandSet
from kiln.simulator.npu.u55.commands import CMD0 as U55_CMD0
from kiln.simulator.npu.u55.commands import CMD1 as U55_CMD1

# The Ethos-U55/U65's registers the U85 does not have, and the U85's own (same word format).
GONE = {
    "PARALLEL_MODE",
    "AB_START",
    "IFM_IB_END",
    "IFM2_IB_START",
    "IFM2_SCALAR",
    "OPA_SCALE",
    "OPB_SCALE",
    "SCALE1_BASE",
    "SCALE1_LENGTH",
    "DMA0_SKIP0",
    "DMA0_SKIP1",
}
NEW_CMD0 = {
    "NPU_OP_RESIZE": 0x007,
    "IFM_BROADCAST": 0x108,
    "RESIZE_X_SCALE_N_M1": 0x12A,
    "RESIZE_Y_SCALE_N_M1": 0x12B,
    "RESIZE_X_OFFSET": 0x12C,
    "RESIZE_Y_OFFSET": 0x12D,
    "WEIGHT_FORMAT": 0x12E,
    "DMA0_IDX_REGION": 0x134,
}
NEW_CMD1 = {
    "IFM_SCALE": 0x025,
    "IFM2_SCALE": 0x026,
    "OP_SCALAR": 0x027,
    "DMA0_SRC_STRIDE0": 0x033,
    "DMA0_SRC_STRIDE1": 0x034,
    "DMA0_DST_STRIDE0": 0x035,
    "DMA0_DST_STRIDE1": 0x036,
    "DMA0_IDX": 0x037,
    "DMA0_IDX_MAX": 0x038,
    "DMA0_IDX_SKIP1": 0x039,
    "WEIGHT2_BASE": 0x092,
    "WEIGHT2_LENGTH": 0x093,
    "WEIGHT3_BASE": 0x094,
    "WEIGHT3_LENGTH": 0x095,
    "RESIZE_X_STEP": 0x096,
    "RESIZE_Y_STEP": 0x097,
    "NPU_OP_BRANCH": 0x100,
}
CMD0 = {name: code for name, code in U55_CMD0.items() if name not in GONE} | NEW_CMD0
CMD1 = {name: code for name, code in U55_CMD1.items() if name not in GONE} | NEW_CMD1

U85_COMMANDS = CommandSet(
    "Ethos-U85", {code: name for name, code in CMD0.items()}, {code: name for name, code in CMD1.items()}
)
