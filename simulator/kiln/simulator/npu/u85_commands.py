"""Ethos-U85 command words: the opcodes of its command stream (Vela 5.2.0's
ethos_u85_interface.hpp, cmd0_opcode and cmd1_opcode).

The word format is the Ethos-U55/U65's (kiln.simulator.npu.commands): opcode in bits
9..0, payload size in bits 15..14, a 16-bit parameter in bits 31..16, and one payload
word after a cmd1 header. Names drop the NPU_SET_ prefix as the U55/U65 tables do; the
same name means the same register on both families, though some fields differ
(kiln.simulator.npu.u85_registers). Addresses are 40 bits: a cmd1 address's parameter
holds bits 39..32 in its low byte.
"""

from __future__ import annotations

from kiln.simulator.npu.commands import CommandSet

CMD0 = {
    "NPU_OP_STOP": 0x000, "NPU_OP_IRQ": 0x001, "NPU_OP_CONV": 0x002, "NPU_OP_DEPTHWISE": 0x003,
    "NPU_OP_POOL": 0x005, "NPU_OP_ELEMENTWISE": 0x006, "NPU_OP_RESIZE": 0x007, "NPU_OP_DMA_START": 0x010,
    "NPU_OP_DMA_WAIT": 0x011, "NPU_OP_KERNEL_WAIT": 0x012, "NPU_OP_PMU_MASK": 0x013,
    "IFM_PAD_TOP": 0x100, "IFM_PAD_LEFT": 0x101, "IFM_PAD_RIGHT": 0x102, "IFM_PAD_BOTTOM": 0x103,
    "IFM_DEPTH_M1": 0x104, "IFM_PRECISION": 0x105, "IFM_UPSCALE": 0x107, "IFM_BROADCAST": 0x108,
    "IFM_ZERO_POINT": 0x109, "IFM_WIDTH0_M1": 0x10A, "IFM_HEIGHT0_M1": 0x10B, "IFM_HEIGHT1_M1": 0x10C,
    "IFM_REGION": 0x10F, "OFM_WIDTH_M1": 0x111, "OFM_HEIGHT_M1": 0x112, "OFM_DEPTH_M1": 0x113,
    "OFM_PRECISION": 0x114, "OFM_BLK_WIDTH_M1": 0x115, "OFM_BLK_HEIGHT_M1": 0x116,
    "OFM_BLK_DEPTH_M1": 0x117, "OFM_ZERO_POINT": 0x118, "OFM_WIDTH0_M1": 0x11A,
    "OFM_HEIGHT0_M1": 0x11B, "OFM_HEIGHT1_M1": 0x11C, "OFM_REGION": 0x11F,
    "KERNEL_WIDTH_M1": 0x120, "KERNEL_HEIGHT_M1": 0x121, "KERNEL_STRIDE": 0x122, "ACC_FORMAT": 0x124,
    "ACTIVATION": 0x125, "ACTIVATION_MIN": 0x126, "ACTIVATION_MAX": 0x127, "WEIGHT_REGION": 0x128,
    "SCALE_REGION": 0x129, "RESIZE_X_SCALE_N_M1": 0x12A, "RESIZE_Y_SCALE_N_M1": 0x12B,
    "RESIZE_X_OFFSET": 0x12C, "RESIZE_Y_OFFSET": 0x12D, "WEIGHT_FORMAT": 0x12E, "BLOCKDEP": 0x12F,
    "DMA0_SRC_REGION": 0x130, "DMA0_DST_REGION": 0x131, "DMA0_SIZE0": 0x132, "DMA0_SIZE1": 0x133,
    "DMA0_IDX_REGION": 0x134,
    "IFM2_BROADCAST": 0x180, "IFM2_PRECISION": 0x185, "IFM2_ZERO_POINT": 0x189, "IFM2_WIDTH0_M1": 0x18A,
    "IFM2_HEIGHT0_M1": 0x18B, "IFM2_HEIGHT1_M1": 0x18C, "IFM2_REGION": 0x18F,
}

CMD1 = {
    "IFM_BASE0": 0x000, "IFM_BASE1": 0x001, "IFM_BASE2": 0x002, "IFM_BASE3": 0x003,
    "IFM_STRIDE_X": 0x004, "IFM_STRIDE_Y": 0x005, "IFM_STRIDE_C": 0x006,
    "OFM_BASE0": 0x010, "OFM_BASE1": 0x011, "OFM_BASE2": 0x012, "OFM_BASE3": 0x013,
    "OFM_STRIDE_X": 0x014, "OFM_STRIDE_Y": 0x015, "OFM_STRIDE_C": 0x016,
    "WEIGHT_BASE": 0x020, "WEIGHT_LENGTH": 0x021, "SCALE_BASE": 0x022, "SCALE_LENGTH": 0x023,
    "OFM_SCALE": 0x024, "IFM_SCALE": 0x025, "IFM2_SCALE": 0x026, "OP_SCALAR": 0x027,
    "DMA0_SRC": 0x030, "DMA0_DST": 0x031, "DMA0_LEN": 0x032, "DMA0_SRC_STRIDE0": 0x033,
    "DMA0_SRC_STRIDE1": 0x034, "DMA0_DST_STRIDE0": 0x035, "DMA0_DST_STRIDE1": 0x036, "DMA0_IDX": 0x037,
    "DMA0_IDX_MAX": 0x038, "DMA0_IDX_SKIP1": 0x039,
    "IFM2_BASE0": 0x080, "IFM2_BASE1": 0x081, "IFM2_BASE2": 0x082, "IFM2_BASE3": 0x083,
    "IFM2_STRIDE_X": 0x084, "IFM2_STRIDE_Y": 0x085, "IFM2_STRIDE_C": 0x086,
    "WEIGHT1_BASE": 0x090, "WEIGHT1_LENGTH": 0x091, "WEIGHT2_BASE": 0x092, "WEIGHT2_LENGTH": 0x093,
    "WEIGHT3_BASE": 0x094, "WEIGHT3_LENGTH": 0x095, "RESIZE_X_STEP": 0x096, "RESIZE_Y_STEP": 0x097,
    "NPU_OP_BRANCH": 0x100,
}

U85_COMMANDS = CommandSet("Ethos-U85", {code: name for name, code in CMD0.items()},
                          {code: name for name, code in CMD1.items()})
