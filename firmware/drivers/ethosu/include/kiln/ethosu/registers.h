// Ethos-U55/U65 register map: offsets (bytes from the NPU base) and bit meanings,
// from the Ethos-U55/U65 TRM (the same facts as Vela's ethos_u55_regs.py).
// Every register is 32 bits and must be accessed with a single aligned 32-bit
// load or store.
#pragma once

#include <cstdint>

namespace kiln::ethosu::reg {

constexpr uint32_t kId = 0x000;
constexpr uint32_t kStatus = 0x004;
constexpr uint32_t kCmd = 0x008;
constexpr uint32_t kReset = 0x00C;
constexpr uint32_t kQbase0 = 0x010;  // command stream address, low word
constexpr uint32_t kQbase1 = 0x014;  // high word
constexpr uint32_t kQread = 0x018;   // bytes of the stream consumed
constexpr uint32_t kQconfig = 0x01C;
constexpr uint32_t kQsize = 0x020;   // command stream length in bytes
constexpr uint32_t kProt = 0x024;
constexpr uint32_t kConfig = 0x028;
constexpr uint32_t kRegioncfg = 0x03C;  // 2 bits per region: AXI port/memory type
constexpr uint32_t kAxiLimit0 = 0x040;  // AXI_LIMIT0..3, 4 bytes apart
constexpr uint32_t kBasep0 = 0x080;     // region n: BASEP0 + 8n low word, + 8n + 4 high word
constexpr uint32_t kPmcr = 0x180;
constexpr uint32_t kPmcntenset = 0x184;
constexpr uint32_t kPmcntenclr = 0x188;
constexpr uint32_t kPmovsset = 0x18C;
constexpr uint32_t kPmovsclr = 0x190;
constexpr uint32_t kPmintset = 0x194;
constexpr uint32_t kPmintclr = 0x198;
constexpr uint32_t kPmccntrLo = 0x1A0;
constexpr uint32_t kPmccntrHi = 0x1A4;  // bits 15..0: the cycle counter's bits 47..32
constexpr uint32_t kPmccntrCfg = 0x1A8;
constexpr uint32_t kPmcaxiChan = 0x1AC;
constexpr uint32_t kPmevcntr0 = 0x300;  // PMEVCNTR0..3
constexpr uint32_t kPmevtyper0 = 0x380;  // PMEVTYPER0..3

constexpr int kRegions = 8;

// STATUS
constexpr uint32_t kStatusRunning = 1u << 0;
constexpr uint32_t kStatusIrqRaised = 1u << 1;
constexpr uint32_t kStatusBusStatus = 1u << 2;
constexpr uint32_t kStatusResetStatus = 1u << 3;
constexpr uint32_t kStatusCmdParseError = 1u << 4;
constexpr uint32_t kStatusCmdEndReached = 1u << 5;
constexpr uint32_t kStatusPmuIrqRaised = 1u << 6;
constexpr uint32_t kStatusWdFault = 1u << 7;
constexpr uint32_t kStatusEccFault = 1u << 8;
constexpr uint32_t kStatusFaultBits =
    kStatusBusStatus | kStatusCmdParseError | kStatusWdFault | kStatusEccFault;

// CMD
constexpr uint32_t kCmdTransitionToRunningState = 1u << 0;
constexpr uint32_t kCmdClearIrq = 1u << 1;
constexpr uint32_t kCmdClockQEnable = 1u << 2;
constexpr uint32_t kCmdPowerQEnable = 1u << 3;
constexpr uint32_t kCmdStopRequest = 1u << 4;

// RESET (request) and PROT (active): privilege and security level.
constexpr uint32_t kResetPendingCplPrivileged = 1u << 0;
constexpr uint32_t kResetPendingCslNonSecure = 1u << 1;

// CONFIG fields
constexpr uint32_t config_macs_log2(uint32_t v) { return v & 0xF; }
constexpr uint32_t config_stream_version(uint32_t v) { return (v >> 4) & 0xF; }
constexpr uint32_t config_shram_kib(uint32_t v) { return (v >> 8) & 0xFF; }
constexpr uint32_t config_product(uint32_t v) { return (v >> 28) & 0xF; }

// ID fields
constexpr uint32_t id_arch_major(uint32_t v) { return (v >> 28) & 0xF; }
constexpr uint32_t id_arch_minor(uint32_t v) { return (v >> 20) & 0xFF; }
constexpr uint32_t id_product_major(uint32_t v) { return (v >> 12) & 0xF; }

// PMU
constexpr uint32_t kPmcrCntEn = 1u << 0;
constexpr uint32_t kPmcrEventCntRst = 1u << 1;
constexpr uint32_t kPmcrCycleCntRst = 1u << 2;
constexpr uint32_t kPmuCycleCounter = 1u << 31;  // in PMCNTEN*, PMOVS*, PMINT*

// --- Command stream (the words at QBASE) ---------------------------------------------
// A command is one word (opcode in bits 9..0, a 16-bit parameter in bits 31..16; bits
// 13..10 reserved, zero) or, when bits 15..14 hold 1, that word followed by a 32-bit
// payload word. Register commands (NPU_SET_*) set a register the NPU_OP_* commands read;
// an address, length or stride register holds payload | parameter << 32 (48 bits).
// Opcodes are Vela's ethos_u55_regs cmd0/cmd1 (the same facts as kiln's NPU model,
// simulator/kiln/simulator/npu/commands.py).
namespace cmd {
constexpr uint32_t kOpcodeMask = 0x3FF;
constexpr uint32_t kReservedMask = 0xF << 10;
constexpr uint32_t kPayloadShift = 14;  // 2 bits: 0 = no payload word, 1 = one payload word

// One-word commands.
constexpr uint16_t kOpStop = 0x000, kOpIrq = 0x001, kOpConv = 0x002, kOpDepthwise = 0x003,
                   kOpPool = 0x005, kOpElementwise = 0x006, kOpDmaStart = 0x010, kOpDmaWait = 0x011,
                   kOpKernelWait = 0x012, kOpPmuMask = 0x013;
constexpr uint16_t kIfmPadTop = 0x100, kIfmPadLeft = 0x101, kIfmPadRight = 0x102,
                   kIfmPadBottom = 0x103, kIfmDepthM1 = 0x104, kIfmPrecision = 0x105,
                   kIfmUpscale = 0x107, kIfmZeroPoint = 0x109, kIfmWidth0M1 = 0x10A,
                   kIfmHeight0M1 = 0x10B, kIfmHeight1M1 = 0x10C, kIfmIbEnd = 0x10D,
                   kIfmRegion = 0x10F;
constexpr uint16_t kOfmWidthM1 = 0x111, kOfmHeightM1 = 0x112, kOfmDepthM1 = 0x113,
                   kOfmPrecision = 0x114, kOfmBlkWidthM1 = 0x115, kOfmBlkHeightM1 = 0x116,
                   kOfmBlkDepthM1 = 0x117, kOfmZeroPoint = 0x118, kOfmWidth0M1 = 0x11A,
                   kOfmHeight0M1 = 0x11B, kOfmHeight1M1 = 0x11C, kOfmRegion = 0x11F;
constexpr uint16_t kKernelWidthM1 = 0x120, kKernelHeightM1 = 0x121, kKernelStride = 0x122,
                   kParallelMode = 0x123, kAccFormat = 0x124, kActivation = 0x125,
                   kActivationMin = 0x126, kActivationMax = 0x127, kWeightRegion = 0x128,
                   kScaleRegion = 0x129, kAbStart = 0x12D, kBlockdep = 0x12F;
constexpr uint16_t kDma0SrcRegion = 0x130, kDma0DstRegion = 0x131, kDma0Size0 = 0x132,
                   kDma0Size1 = 0x133;
constexpr uint16_t kIfm2Broadcast = 0x180, kIfm2Scalar = 0x181, kIfm2Precision = 0x185,
                   kIfm2ZeroPoint = 0x189, kIfm2Width0M1 = 0x18A, kIfm2Height0M1 = 0x18B,
                   kIfm2Height1M1 = 0x18C, kIfm2IbStart = 0x18D, kIfm2Region = 0x18F;

// Commands with a payload word.
constexpr uint16_t kIfmBase0 = 0x000, kIfmStrideX = 0x004, kIfmStrideY = 0x005, kIfmStrideC = 0x006;
constexpr uint16_t kOfmBase0 = 0x010, kOfmStrideX = 0x014, kOfmStrideY = 0x015, kOfmStrideC = 0x016;
constexpr uint16_t kWeightBase = 0x020, kWeightLength = 0x021, kScaleBase = 0x022,
                   kScaleLength = 0x023, kOfmScale = 0x024, kOpaScale = 0x025, kOpbScale = 0x026;
constexpr uint16_t kDma0Src = 0x030, kDma0Dst = 0x031, kDma0Len = 0x032, kDma0Skip0 = 0x033,
                   kDma0Skip1 = 0x034;
constexpr uint16_t kIfm2Base0 = 0x080, kIfm2StrideX = 0x084, kIfm2StrideY = 0x085,
                   kIfm2StrideC = 0x086;
constexpr uint16_t kWeight1Base = 0x090, kWeight1Length = 0x091, kScale1Base = 0x092,
                   kScale1Length = 0x093;
// *_BASE0..3: the four tiles' base registers are consecutive opcodes.
constexpr int kTiles = 4;

// Fields.
constexpr uint32_t precision_ifm_size(uint32_t v) { return (v >> 2) & 3; }  // 0: 8, 1: 16, 2: 32 bits
constexpr uint32_t precision_ofm_size(uint32_t v) { return (v >> 1) & 3; }
constexpr uint32_t precision_format(uint32_t v) { return (v >> 6) & 3; }    // 0: NHWC, 1: NHCWB16
constexpr uint32_t kFormatNhwc = 0, kFormatNhcwb16 = 1;
constexpr uint32_t kBrick = 16;  // channels of one NHCWB16 brick
constexpr uint32_t stride_x(uint32_t kernel_stride) {
  return ((kernel_stride & 1) | (((kernel_stride >> 6) & 7) << 1)) + 1;
}
constexpr uint32_t stride_y(uint32_t kernel_stride) {
  return (((kernel_stride >> 1) & 1) | (((kernel_stride >> 9) & 7) << 1)) + 1;
}
constexpr uint32_t kUpscaleNone = 0, kUpscaleTranspose = 2;  // IFM_UPSCALE bits 1..0
constexpr uint32_t kPoolReduceSum = 2;                         // NPU_OP_POOL's parameter
constexpr uint32_t kIfm2BroadcastScalar = 1u << 7;  // IFM2_BROADCAST: a scalar operand, no IFM2 read
constexpr uint32_t kIfm2BroadcastH = 1u << 0, kIfm2BroadcastW = 1u << 1, kIfm2BroadcastC = 1u << 2;
constexpr uint32_t kElementwiseFirstUnary = 5, kElementwiseLastUnary = 7;  // LRELU, ABS, CLZ
constexpr uint32_t dma_region(uint32_t v) { return v & 0xFF; }
constexpr bool dma_internal(uint32_t v) { return (v >> 8) & 1; }  // SHRAM (LUT) side
constexpr uint32_t dma_mode(uint32_t v) { return (v >> 9) & 3; }  // 0: 1-D, 1: 2-D, 2: 3-D
constexpr uint32_t kDma1d = 0, kDma2d = 1, kDma3d = 2;
constexpr uint32_t kScaleRecordBytes = 10;  // bias and scale of one OFM channel
}  // namespace cmd

}  // namespace kiln::ethosu::reg
