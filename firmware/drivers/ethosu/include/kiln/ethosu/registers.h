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

}  // namespace kiln::ethosu::reg
