// kiln's Ethos-U driver: runs a Vela-compiled command stream on an Ethos-U55, U65 or U85.
// One code base: what differs between the families (register offsets, PMU counters, fault
// bits, AXI set-up, command stream) is data, reg::Family in kiln/ethosu/registers.h.
//
//   auto npu = kiln::ethosu::Driver::create(KILN_NPU_BASE);      // reads ID and CONFIG
//   auto stream = npu.value().check(payload, payload_size);       // validates the COP1 payload
//   kiln::ethosu::Region regions[] = {{weights, weights_size}, {arena, arena_size}};
//   // clean what the CPU wrote for the NPU (kiln::cpu::maintain_dcache), then:
//   auto cycles = npu.value().run(stream.value(), regions, 2);    // NPU PMU cycles
//   // invalidate what the CPU reads back, then read it
//
// The NPU does not snoop the CPU's D-cache: the caller keeps kiln/cpu.h's cache
// contract for every byte the NPU reads or writes; the driver does no maintenance.
// One stream runs at a time; run() blocks until the NPU's completion interrupt
// (or the timeout), so the driver owns the NPU interrupt (kiln_npu_irq_handler)
// while a Driver exists. No heap, no exceptions: every failure is a
// kiln::runtime::Error with one of the driver's codes (kCop1*, kNpu*: error.h);
// kiln::runtime::print_error prints it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/ethosu/registers.h"
#include "kiln/runtime/result.h"

namespace kiln::ethosu {

using runtime::Error;
using runtime::ErrorCode;
using runtime::Result;
using runtime::Status;

// The command stream inside a checked COP1 payload. Borrowed: it points into the
// payload, which must outlive it and stay unchanged.
struct CommandStream {
  const uint32_t* words = nullptr;  // 16-byte aligned
  uint32_t size_bytes = 0;
  uint32_t config = 0;  // the CONFIG value the stream was compiled for
  uint32_t id = 0;      // the ID value the stream was compiled for
};

// One NPU region (BASEP<n>): `base` is the address the stream's region offsets add
// to, `size` its bytes. Base: 16-byte aligned.
struct Region {
  const void* base = nullptr;
  size_t size = 0;
};

// The command stream of a COP1 payload (Driver::check without the match against an NPU):
// magic, driver actions, lengths, bounds and alignment. `payload`: 16-byte aligned.
Result<CommandStream> parse_cop1(const void* payload, size_t size);

// What a command stream may touch, for check_stream_bounds: region n (BASEP<n>, n below
// `count`) holds regions[n].size bytes, which the NPU writes only if `writable`; an
// internal DMA destination (the LUT) lies in one core's SHRAM, shram_bytes; `cores` NPU
// cores each read their own weights and scales.
struct RegionLimit {
  uint32_t size = 0;
  bool writable = false;
};

struct StreamBounds {
  const RegionLimit* regions = nullptr;
  int count = 0;
  uint32_t shram_bytes = 0;  // bytes an internal DMA destination may use (the LUT's memory)
  uint32_t cores = 1;
  bool u85 = false;          // the stream is an Ethos-U85's (its opcodes and fields)
};

// Proves that every memory access of `stream`'s operations (IFM, IFM2, OFM, weights,
// scales, DMA source and destination, with their strides, tiles, element sizes, NHWC or
// NHCWB16 format, kernel, padding and upscaling) lies inside the buffer of the region it
// names, walking the stream once up to its NPU_OP_STOP (bounds.cpp states the access model).
// Run it once per stream, before the first run() (the delegate does it at init), with the
// same buffers run() gets. Errors (runtime/error.h): kNpuAccessOutside, kNpuAccessNoRegion,
// kNpuAccessReadOnly (a = runtime::NpuAccess, b = the operation's word index),
// kNpuStreamUnprovable (a = word index, b = the word: an unknown opcode, a missing payload
// word, a reserved precision, format, upscaling or DMA mode, a DMA from SHRAM, or padding
// that leaves no IFM; on the Ethos-U85 also what the check does not model: BRANCH, indexed
// DMA, a CONV's weights read from IFM2 (matmul), 3x1 tiles, reserved transposes or modes),
// kInvalidArgument (a = 1: bounds malformed). It uses no memory beyond
// its stack frame and reads each command word once: about 70 instructions per command
// on a Cortex-M55 (measured in bounds.cpp).
Status check_stream_bounds(const CommandStream& stream, const StreamBounds& bounds);

// The bounds of regions[0..count) on an NPU whose CONFIG register reads `config` (its
// family's command stream, its cores (two on an Ethos-U65-512, 2^num_wd on an Ethos-U85)
// and the memory an internal DMA may write: a core's SHRAM share, the U85's 2 KiB LUT).
StreamBounds bounds_for(uint32_t config, const RegionLimit* regions, int count);

// The stream must have been compiled for an NPU whose registers read `npu_config` and
// `npu_id`: the same family and MACs per cycle (else kNpuTargetMismatch, a = the stream's
// CONFIG, b = the NPU's: the message names both, e.g. "the delegate was compiled for
// Ethos-U85 with 256 MACs; this NPU is an Ethos-U55 with 128 MACs"; also the U85's AXI port
// counts), the same SHRAM size (U55/U65: kNpuShramMismatch), command stream version
// (kNpuStreamVersionMismatch) and architecture major revision, not a newer minor one
// (kNpuArchMismatch).
Status match_target(const CommandStream& stream, uint32_t npu_config, uint32_t npu_id);

struct RunOptions {
  // Wall time the CPU waits for the completion interrupt, counted in the platform's 1 ms
  // SysTick wake-ups. 0 does not wait: a run whose interrupt has not come by the first
  // check times out.
  uint32_t timeout_ms = 10000;
  // REGIONCFG: 2 bits per region n (bits 2n+1..2n) choosing one of the four memory
  // attribute sets the driver sets up after each reset (reg::Family::bring_up: AXI_LIMITn on
  // the U55/U65, MEM_ATTRn on the U85, whose sets 0 and 1 are its SRAM port, 2 and 3 its
  // external port). 0: every region uses set 0.
  uint32_t regioncfg = 0;
};

// The PMU's counts of one run(), or summed over several (add). total is the cycle counter
// (PMCCNTR: every cycle from the PMU's enable before the start to the completion); the
// events are the family's event counters (reg::Family::pmu_events), 32 bits each per run.
// Where the family has no counter for one (Ethos-U55/U65: NPU_ACTIVE, AXI1 write beats),
// `counted` lacks its bit and its value is derived: active = total - idle, else 0.
// AXI0/AXI1 are the U85's SRAM/external ports. A beat is one AXI data transfer (8 bytes on
// the Ethos-U55's 64-bit AXI, 16 on the U65's and U85's 128-bit).
struct PmuCounts {
  // Event e is what PMEVTYPER event reg::kCountedEventTypes[e] counts.
  enum Event {
    kActive = reg::kCountActive,
    kIdle = reg::kCountIdle,
    kAxi0ReadBeats = reg::kCountAxi0Read,
    kAxi0WriteBeats = reg::kCountAxi0Write,
    kAxi1ReadBeats = reg::kCountAxi1Read,
    kAxi1WriteBeats = reg::kCountAxi1Write,
    kEvents = reg::kCountedEvents
  };
  uint64_t total = 0;
  uint64_t events[kEvents] = {};
  uint32_t counted = 0;  // bit e: events[e] came from an event counter

  void add(const PmuCounts& other) {
    total += other.total;
    for (int e = 0; e < kEvents; ++e) events[e] += other.events[e];
    counted |= other.counted;
  }
};

class Driver {
 public:
  // The driver for the NPU whose registers are at `base`: reads ID and CONFIG, soft-resets
  // the NPU (privileged, secure) and writes its family's memory attributes and AXI limits.
  // kNpuNotFound (a = ID, b = base) when CONFIG.product is no family kiln knows or ID's
  // architecture major revision is not that family's (1: U55/U65, 2: U85).
  static Result<Driver> create(uintptr_t base);

  Driver() = default;

  uint32_t id() const { return id_; }
  uint32_t config() const { return config_; }
  uint32_t macs_per_cycle() const;
  uint32_t shram_kib() const;  // 0 on an Ethos-U85 (its CONFIG has no SHRAM field)
  // STATUS as the NPU reads now (reg::kStatus* name its bits): after a run() that failed,
  // 0 once the driver's reset stopped the NPU. Only on a Driver from create().
  uint32_t status() const;
  // check_stream_bounds for this NPU (bounds_for its CONFIG) with regions[0..count).
  Status check_bounds(const CommandStream& stream, const RegionLimit* regions, int count) const;

  // Validates a COP1 payload (Vela's cmd_data) for this NPU: magic, driver
  // actions, lengths and bounds (parse_cop1), then match_target against this NPU's
  // CONFIG and ID. `payload`: 16-byte aligned.
  Result<CommandStream> check(const void* payload, size_t size) const;

  // Runs `stream` with regions[0..count) as BASEP0..count-1 and returns the NPU's
  // PMU cycle count for the run; it does no cache maintenance (see kiln/cpu.h).
  // On a fault (kNpuFault: a = STATUS) or a timeout the NPU is reset before
  // returning. Call from thread mode with interrupts enabled (PRIMASK clear):
  // completion is signalled by the NPU interrupt, which runs at priority 0; for the
  // wait, SysTick is borrowed and BASEPRI raised to 0x80 (kiln::cpu::MillisecondTicks).
  // Regions' addresses are written as 40-bit BASEP pairs (low word, high word); a fault
  // is any of the family's fault bits (U55/U65: bus_status, cmd_parse_error, wd_fault,
  // ecc_fault; U85: bus_status, cmd_parse_error, ecc_fault, branch_fault).
  // Errors: kInvalidArgument (a = 2, b = count outside 0..kRegions; a = 0: no stream),
  // kNpuBusy, kNpuFault, kNpuIncomplete, kNpuTimeout, kNpuResetFailed.
  // Before the start it resets the PMU's counters: the cycle counter and the family's event
  // counters (reg::Family::pmu_events), enabled after each reset; pmu_counts() reads them after.
  // Register accesses per run: REGIONCFG, BASEPn's low words, a read of PMCNTENSET (the PMU set
  // up again when a reset or a power-down lost its setup), PMCR, QBASE, QSIZE and CMD (a 32-bit
  // CPU's high address words are 0 from the reset).
  Result<uint64_t> run(const CommandStream& stream, const Region* regions, int count,
                       const RunOptions& options = RunOptions()) const;

  // The PMU's counts of the last run() that succeeded, `total` the cycle count it returned,
  // the events read from the NPU's counters: valid until the next run() (which resets them)
  // or a failed one (whose reset clears them).
  PmuCounts pmu_counts(uint64_t total) const;

 private:
  explicit Driver(uintptr_t base) : base_(base) {}
  uint32_t read(uint32_t offset) const;
  void write(uint32_t offset, uint32_t value) const;
  // Sets the PMU's event types and counter enables (reg::Family::pmu_events) unless they hold.
  void keep_pmu_set_up() const;
  Status soft_reset() const;
  void program(const CommandStream& stream, const Region* regions, int count, const RunOptions& options) const;
  Result<uint32_t> wait_for_completion(uint32_t timeout_ms) const;
  uint64_t read_cycle_counter() const;

  uintptr_t base_ = 0;
  uint32_t id_ = 0;
  uint32_t config_ = 0;
};

}  // namespace kiln::ethosu
