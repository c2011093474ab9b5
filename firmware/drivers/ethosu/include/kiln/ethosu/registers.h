// Ethos-U55/U65/U85 register map: offsets (bytes from the NPU base) and bit meanings,
// from the TRMs (the same facts as Vela 5.2's generated headers
// ethosu65/ethos_u65_interface.hpp, which the U55 shares, and ethosu85/ethos_u85_interface.hpp).
// Every register is 32 bits and must be accessed with a single aligned 32-bit
// load or store. What differs between the families is data: kiln::ethosu::Family
// (below) holds each family's offsets, counts and fault bits; the driver and the
// bounds check pick one by CONFIG.product and never branch on a family name.
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
constexpr uint32_t kRegioncfg = 0x03C;  // 2 bits per region: which of 4 memory attribute sets
// 0x040..0x04C: four memory attribute sets, REGIONCFG's 2-bit fields index them.
// Ethos-U55/U65: AXI_LIMIT0..3 (memory type, burst, outstanding transactions);
// Ethos-U85: MEM_ATTR0..3 (AXI port, shareability, memory type). Same offsets, other fields.
constexpr uint32_t kAxiLimit0 = 0x040;
constexpr uint32_t kMemAttr0 = 0x040;
constexpr uint32_t kAttributeSets = 4;
constexpr uint32_t kAxiSram = 0x050;  // Ethos-U85 only: limits of the SRAM AXI port(s)
constexpr uint32_t kAxiExt = 0x054;   // Ethos-U85 only: limits of the external AXI port
constexpr uint32_t kBasep0 = 0x080;   // region n: BASEP0 + 8n low word, + 8n + 4 high word

// The PMU block, at these offsets on the Ethos-U55/U65; the Ethos-U85 has it (with the
// status/debug block) 0x1000 higher: add Family::pmu_offset.
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
constexpr uint32_t kPmevcntr0 = 0x300;   // PMEVCNTR0..(Family::event_counters - 1)
constexpr uint32_t kPmevtyper0 = 0x380;  // PMEVTYPER0..(Family::event_counters - 1)

constexpr int kRegions = 8;

// STATUS (bits 7 and 9 differ: Family::fault_bits says which are faults)
constexpr uint32_t kStatusRunning = 1u << 0;
constexpr uint32_t kStatusIrqRaised = 1u << 1;
constexpr uint32_t kStatusBusStatus = 1u << 2;
constexpr uint32_t kStatusResetStatus = 1u << 3;
constexpr uint32_t kStatusCmdParseError = 1u << 4;
constexpr uint32_t kStatusCmdEndReached = 1u << 5;
constexpr uint32_t kStatusPmuIrqRaised = 1u << 6;
constexpr uint32_t kStatusWdFault = 1u << 7;       // Ethos-U55/U65 (reserved on the U85)
constexpr uint32_t kStatusEccFault = 1u << 8;
constexpr uint32_t kStatusBranchFault = 1u << 9;   // Ethos-U85 (reserved on the U55/U65)
constexpr uint32_t kStatusFaultBits =              // the Ethos-U55/U65's
    kStatusBusStatus | kStatusCmdParseError | kStatusWdFault | kStatusEccFault;
constexpr uint32_t kStatusFaultBitsU85 = kStatusBusStatus | kStatusCmdParseError | kStatusEccFault | kStatusBranchFault;

// CMD
constexpr uint32_t kCmdTransitionToRunningState = 1u << 0;
constexpr uint32_t kCmdClearIrq = 1u << 1;
constexpr uint32_t kCmdClockQEnable = 1u << 2;
constexpr uint32_t kCmdPowerQEnable = 1u << 3;
constexpr uint32_t kCmdStopRequest = 1u << 4;

// RESET (request) and PROT (active): privilege and security level.
constexpr uint32_t kResetPendingCplPrivileged = 1u << 0;
constexpr uint32_t kResetPendingCslNonSecure = 1u << 1;

// CONFIG fields. Bits 3..0, 7..4 and 31..28 mean the same on every family; bits 15..8
// are the SHRAM size in KiB on the Ethos-U55/U65 and, on the Ethos-U85, num_axi_sram
// (9..8, log2 of the SRAM AXI ports), num_axi_ext (10, log2 of the external ports) and
// num_wd (13..12, log2 of the weight decoders: one per core).
constexpr uint32_t config_macs_log2(uint32_t v) { return v & 0xF; }
constexpr uint32_t config_stream_version(uint32_t v) { return (v >> 4) & 0xF; }
constexpr uint32_t config_shram_kib(uint32_t v) { return (v >> 8) & 0xFF; }
constexpr uint32_t config_product(uint32_t v) { return (v >> 28) & 0xF; }
constexpr uint32_t config_axi_sram_log2(uint32_t v) { return (v >> 8) & 3; }
constexpr uint32_t config_axi_ext_log2(uint32_t v) { return (v >> 10) & 1; }
constexpr uint32_t config_wd_log2(uint32_t v) { return (v >> 12) & 3; }

// ID fields
constexpr uint32_t id_arch_major(uint32_t v) { return (v >> 28) & 0xF; }
constexpr uint32_t id_arch_minor(uint32_t v) { return (v >> 20) & 0xFF; }
constexpr uint32_t id_product_major(uint32_t v) { return (v >> 12) & 0xF; }

// PMU
constexpr uint32_t kPmcrCntEn = 1u << 0;
constexpr uint32_t kPmcrEventCntRst = 1u << 1;
constexpr uint32_t kPmcrCycleCntRst = 1u << 2;
constexpr uint32_t kPmuCycleCounter = 1u << 31;  // in PMCNTEN*, PMOVS*, PMINT*
constexpr uint32_t kMaxEventCounters = 8;        // the U85's; the U55/U65 have 4

// PMEVTYPERn values: pmu_event numbers (Vela 5.2.0's ethos_u65_interface.hpp, the U55's
// too, and ethos_u85_interface.hpp). The U85's SRAM_* and EXT_* port events have the
// U55/U65's AXI0_* and AXI1_* numbers: its SRAM port is AXI0 here, its external port AXI1.
constexpr uint32_t kEventNone = 0x00;
constexpr uint32_t kEventNpuIdle = 0x20;    // NPU_IDLE: cycles the NPU is enabled but idle
constexpr uint32_t kEventNpuActive = 0x23;  // NPU_ACTIVE: cycles the NPU is running
constexpr uint32_t kEventAxi0RdBeats = 0x82;   // AXI0_RD_DATA_BEAT_RECEIVED (U85: SRAM_)
constexpr uint32_t kEventAxi0WrBeats = 0x87;   // AXI0_WR_DATA_BEAT_WRITTEN (U85: SRAM_)
constexpr uint32_t kEventAxi1RdBeats = 0x182;  // AXI1_RD_DATA_BEAT_RECEIVED (U85: EXT_)
constexpr uint32_t kEventAxi1WrBeats = 0x187;  // AXI1_WR_DATA_BEAT_WRITTEN (U85: EXT_)

// The events the driver counts, in the order of ethosu::PmuCounts::Event (kiln/ethosu/driver.h),
// and the PMEVTYPER number of each.
enum CountedEvent : uint8_t {
  kCountActive,
  kCountIdle,
  kCountAxi0Read,
  kCountAxi0Write,
  kCountAxi1Read,
  kCountAxi1Write,
  kCountedEvents,
  kNotCounted = 0xFF,  // an event counter the driver leaves off
};
constexpr uint16_t kCountedEventTypes[kCountedEvents] = {kEventNpuActive,   kEventNpuIdle,     kEventAxi0RdBeats,
                                                         kEventAxi0WrBeats, kEventAxi1RdBeats, kEventAxi1WrBeats};

// --- The families -------------------------------------------------------------------
// A register write of a family's bring-up (after every soft reset, before any run).
struct RegisterValue {
  uint32_t offset = 0;
  uint32_t value = 0;
};
constexpr int kBringUpWrites = 6;

// What differs between the Ethos-U55, U65 and U85 for the driver and the bounds check.
struct Family {
  uint8_t product;          // CONFIG.product: 0 Ethos-U55, 1 Ethos-U65, 2 Ethos-U85
  uint8_t arch_major;       // ID.arch_major_rev of every NPU of the family
  uint8_t event_counters;   // PMEVCNTR/PMEVTYPER pairs
  bool shram_in_config;     // CONFIG bits 15..8 are the SHRAM size in KiB
  bool u85_commands;        // the command stream is the Ethos-U85's (bounds.cpp)
  uint16_t pmu_offset;      // added to kPmcr..kPmevtyper0 (the PMU block moves on the U85)
  uint16_t fault_bits;      // STATUS bits that end a run as a fault
  uint16_t lut_bytes;       // bytes of the internal DMA destination (the LUT) per core;
                            // 0: the core's share of the SHRAM that CONFIG states
  // Memory attribute sets and AXI limits, written in this order after each reset
  // (offset 0 ends the list). Values: Arm's driver defaults (zephyrproject-rtos/hal_ethos_u,
  // src/ethosu_config_u55.h and ethosu_config_u85.h).
  // U55/U65 AXI_LIMITn: max_beats 64 B (bits 1..0 = 0), memtype 0 (bits 7..4),
  //   32 outstanding reads (bits 21..16 = 31), 16 outstanding writes (bits 28..24 = 15).
  // U85 MEM_ATTRn: n = 0, 1 the SRAM AXI port, n = 2, 3 the external port (axi_port, bit 2),
  //   non-shareable, device non-bufferable; AXI_SRAM: 12 reads, 16 writes outstanding,
  //   256-byte bursts (max_beats 2, bits 17..16); AXI_EXT: 64 reads, 32 writes, 256 bytes.
  RegisterValue bring_up[kBringUpWrites];
  // What event counter n = 0..event_counters - 1 counts (its PMEVTYPERn is programmed
  // after every reset: kCountedEventTypes, or kEventNone for kNotCounted, which stays off).
  // The U55/U65's four count what Arm's ML evaluation kit counts there (NPU_IDLE and three
  // AXI beat counts; NPU_ACTIVE is then the cycle counter less NPU_IDLE); the U85's eight
  // also count NPU_ACTIVE and AXI1 write beats.
  CountedEvent pmu_events[kMaxEventCounters];
};

constexpr uint32_t kProductU55 = 0, kProductU65 = 1, kProductU85 = 2;
constexpr uint32_t kAxiLimitDefault = (31u << 16) | (15u << 24);
constexpr uint32_t kMemAttrSramPort = 0, kMemAttrExtPort = 1u << 2;
constexpr uint32_t kAxiSramDefault = 11u | (15u << 8) | (2u << 16);
constexpr uint32_t kAxiExtDefault = 63u | (31u << 8) | (2u << 16);

// inline: one copy in the image, however many sources include this header.
inline constexpr Family kFamilies[] = {
    {kProductU55,
     1,
     4,
     true,
     false,
     0,
     kStatusFaultBits,
     0,
     {{kAxiLimit0, kAxiLimitDefault},
      {kAxiLimit0 + 4, kAxiLimitDefault},
      {kAxiLimit0 + 8, kAxiLimitDefault},
      {kAxiLimit0 + 12, kAxiLimitDefault},
      {},
      {}},
     {kCountIdle, kCountAxi0Read, kCountAxi0Write, kCountAxi1Read, kNotCounted, kNotCounted, kNotCounted, kNotCounted}},
    {kProductU65,
     1,
     4,
     true,
     false,
     0,
     kStatusFaultBits,
     0,
     {{kAxiLimit0, kAxiLimitDefault},
      {kAxiLimit0 + 4, kAxiLimitDefault},
      {kAxiLimit0 + 8, kAxiLimitDefault},
      {kAxiLimit0 + 12, kAxiLimitDefault},
      {},
      {}},
     {kCountIdle, kCountAxi0Read, kCountAxi0Write, kCountAxi1Read, kNotCounted, kNotCounted, kNotCounted, kNotCounted}},
    {kProductU85,
     2,
     8,
     false,
     true,
     0x1000,
     kStatusFaultBitsU85,
     2048,
     {{kMemAttr0, kMemAttrSramPort},
      {kMemAttr0 + 4, kMemAttrSramPort},
      {kMemAttr0 + 8, kMemAttrExtPort},
      {kMemAttr0 + 12, kMemAttrExtPort},
      {kAxiSram, kAxiSramDefault},
      {kAxiExt, kAxiExtDefault}},
     {kCountActive, kCountIdle, kCountAxi0Read, kCountAxi0Write, kCountAxi1Read, kCountAxi1Write, kNotCounted,
      kNotCounted}},
};

// The family of an NPU whose CONFIG register reads `config`, or nullptr for a product
// kiln does not know.
constexpr const Family* family_of(uint32_t config) {
  for (const Family& f : kFamilies) {
    if (f.product == config_product(config)) return &f;
  }
  return nullptr;
}

// NPU cores: two on an Ethos-U65-512 (2^9 MACs), 2^num_wd on an Ethos-U85, else one.
constexpr uint32_t cores_of(uint32_t config) {
  if (config_product(config) == kProductU85) return 1u << config_wd_log2(config);
  return config_product(config) == kProductU65 && config_macs_log2(config) == 9 ? 2 : 1;
}

// --- Command stream (the words at QBASE) ---------------------------------------------
// A command is one word (opcode in bits 9..0, a 16-bit parameter in bits 31..16; bits
// 13..10 reserved, zero) or, when bits 15..14 hold 1, that word followed by a 32-bit
// payload word. Register commands (NPU_SET_*) set a register the NPU_OP_* commands read;
// an address, length or stride register holds payload | parameter << 32 (48 bits).
// Opcodes are Vela's cmd0/cmd1 (ethos_u65_interface.hpp for the U55/U65, the same facts
// as kiln's NPU model, simulator/kiln/simulator/npu/u55/commands.py; ethos_u85_interface.hpp
// for the U85). Most opcodes mean the same on both; the U85's own are marked "U85", the
// U55/U65's own "U55/U65", and a few numbers mean different registers (kAbStart and
// kResizeYOffset, kDma0Skip0/1 and kDma0SrcStride0/1, kScale1* and kWeight2*).
namespace cmd {
constexpr uint32_t kOpcodeMask = 0x3FF;
constexpr uint32_t kReservedMask = 0xF << 10;
constexpr uint32_t kPayloadShift = 14;  // 2 bits: 0 = no payload word, 1 = one payload word

// One-word commands.
constexpr uint16_t kOpStop = 0x000, kOpIrq = 0x001, kOpConv = 0x002, kOpDepthwise = 0x003, kOpPool = 0x005,
                   kOpElementwise = 0x006, kOpDmaStart = 0x010, kOpDmaWait = 0x011, kOpKernelWait = 0x012,
                   kOpPmuMask = 0x013;
constexpr uint16_t kIfmPadTop = 0x100, kIfmPadLeft = 0x101, kIfmPadRight = 0x102, kIfmPadBottom = 0x103,
                   kIfmDepthM1 = 0x104, kIfmPrecision = 0x105, kIfmUpscale = 0x107, kIfmZeroPoint = 0x109,
                   kIfmWidth0M1 = 0x10A, kIfmHeight0M1 = 0x10B, kIfmHeight1M1 = 0x10C, kIfmIbEnd = 0x10D,
                   kIfmRegion = 0x10F;
constexpr uint16_t kOfmWidthM1 = 0x111, kOfmHeightM1 = 0x112, kOfmDepthM1 = 0x113, kOfmPrecision = 0x114,
                   kOfmBlkWidthM1 = 0x115, kOfmBlkHeightM1 = 0x116, kOfmBlkDepthM1 = 0x117, kOfmZeroPoint = 0x118,
                   kOfmWidth0M1 = 0x11A, kOfmHeight0M1 = 0x11B, kOfmHeight1M1 = 0x11C, kOfmRegion = 0x11F;
constexpr uint16_t kKernelWidthM1 = 0x120, kKernelHeightM1 = 0x121, kKernelStride = 0x122, kParallelMode = 0x123,
                   kAccFormat = 0x124, kActivation = 0x125, kActivationMin = 0x126, kActivationMax = 0x127,
                   kWeightRegion = 0x128, kScaleRegion = 0x129, kAbStart = 0x12D, kBlockdep = 0x12F;
constexpr uint16_t kDma0SrcRegion = 0x130, kDma0DstRegion = 0x131, kDma0Size0 = 0x132, kDma0Size1 = 0x133;
constexpr uint16_t kIfm2Broadcast = 0x180, kIfm2Scalar = 0x181, kIfm2Precision = 0x185, kIfm2ZeroPoint = 0x189,
                   kIfm2Width0M1 = 0x18A, kIfm2Height0M1 = 0x18B, kIfm2Height1M1 = 0x18C, kIfm2IbStart = 0x18D,
                   kIfm2Region = 0x18F;
// U85 one-word commands.
constexpr uint16_t kOpResize = 0x007, kIfmBroadcast = 0x108, kResizeXScaleNM1 = 0x12A, kResizeYScaleNM1 = 0x12B,
                   kResizeXOffset = 0x12C, kResizeYOffset = 0x12D, kWeightFormat = 0x12E, kDma0IdxRegion = 0x134;

// Commands with a payload word.
constexpr uint16_t kIfmBase0 = 0x000, kIfmStrideX = 0x004, kIfmStrideY = 0x005, kIfmStrideC = 0x006;
constexpr uint16_t kOfmBase0 = 0x010, kOfmStrideX = 0x014, kOfmStrideY = 0x015, kOfmStrideC = 0x016;
constexpr uint16_t kWeightBase = 0x020, kWeightLength = 0x021, kScaleBase = 0x022, kScaleLength = 0x023,
                   kOfmScale = 0x024, kOpaScale = 0x025, kOpbScale = 0x026;
constexpr uint16_t kDma0Src = 0x030, kDma0Dst = 0x031, kDma0Len = 0x032, kDma0Skip0 = 0x033, kDma0Skip1 = 0x034;
constexpr uint16_t kIfm2Base0 = 0x080, kIfm2StrideX = 0x084, kIfm2StrideY = 0x085, kIfm2StrideC = 0x086;
constexpr uint16_t kWeight1Base = 0x090, kWeight1Length = 0x091, kScale1Base = 0x092, kScale1Length = 0x093;
// U85 commands with a payload word.
constexpr uint16_t kIfmScale = 0x025, kIfm2Scale = 0x026, kOpScalar = 0x027;
constexpr uint16_t kDma0SrcStride0 = 0x033, kDma0SrcStride1 = 0x034, kDma0DstStride0 = 0x035, kDma0DstStride1 = 0x036,
                   kDma0Idx = 0x037, kDma0IdxMax = 0x038, kDma0IdxSkip1 = 0x039;
constexpr uint16_t kWeight2Base = 0x092, kWeight2Length = 0x093, kWeight3Base = 0x094, kWeight3Length = 0x095,
                   kResizeX = 0x096, kResizeY = 0x097;
constexpr uint16_t kOpBranch = 0x100;  // a payload-word command that is an operation
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

// U85 fields (ethos_u85_interface.hpp). Precision registers: bits 15..14 are the storage
// (IFM, IFM2, OFM); the OFM's also has reverse (10..9) and transpose (13..11).
constexpr uint32_t precision_storage(uint32_t v) { return (v >> 14) & 3; }
constexpr uint32_t kStorageTile2x2 = 0, kStorageTile3x1 = 1, kStorageChained = 2, kStorageNone = 3;
constexpr uint32_t ofm_transpose(uint32_t v) { return (v >> 11) & 7; }
// activation_transpose: the OFM's memory axes in terms of the computed (H, W, C).
constexpr uint32_t kTransposeHwc = 0, kTransposeWhc = 1, kTransposeHcw = 2, kTransposeWch = 3, kTransposeChw = 6,
                   kTransposeCwh = 7;
constexpr uint32_t u85_stride_x(uint32_t kernel_stride) {
  return ((kernel_stride & 1) | (((kernel_stride >> 6) & 1) << 1)) + 1;
}
constexpr uint32_t u85_stride_y(uint32_t kernel_stride) {
  return (((kernel_stride >> 1) & 1) | (((kernel_stride >> 9) & 1) << 1)) + 1;
}
constexpr bool conv_weights_ifm2(uint32_t param) { return param & 1; }  // NPU_OP_CONV: weights from IFM2
constexpr uint32_t acc_input(uint32_t acc_format) { return (acc_format >> 4) & 3; }
constexpr uint32_t kAccInputIfm2 = 2;  // the accumulators start from IFM2 (a memory read)
// broadcast_mode (IFM_BROADCAST, IFM2_BROADCAST): H, W, C bits as the U55's, SCALAR = 8.
constexpr uint32_t kBroadcastScalarU85 = 8, kBroadcastLastU85 = 8;
// elementwise_mode: the unary ones, and the first of each defined run (0..11, 16..19, 33..36, 42).
constexpr bool u85_elementwise_known(uint32_t m) {
  return m <= 11 || (m >= 16 && m <= 19) || (m >= 33 && m <= 36) || m == 42;
}
constexpr bool u85_elementwise_unary(uint32_t m) { return (m >= 5 && m <= 7) || m == 36; }  // LRELU, ABS, CLZ, NOT
constexpr uint32_t kPoolLastU85 = 7;  // pooling_mode: MAX .. ARGMAX_Y
constexpr uint32_t kPoolArgmaxX = 6, kPoolArgmaxY = 7;
constexpr uint32_t kResizeLastMode = 2;  // resize_mode: BILINEAR, REPLICATE, NEAREST
// DMA0_SRC_REGION / DMA0_DST_REGION: region 2..0, internal 8, stride mode 10..9 (source
// only: it is both sides'), indexed 11.
constexpr uint32_t u85_dma_region(uint32_t v) { return v & 7; }
constexpr bool u85_dma_indexed(uint32_t v) { return (v >> 11) & 1; }
}  // namespace cmd

}  // namespace kiln::ethosu::reg
