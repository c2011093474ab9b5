// kiln's Ethos-U55/U65 driver: runs a Vela-compiled command stream on the NPU.
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
  uint32_t shram_bytes = 0;
  uint32_t cores = 1;
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
// that leaves no IFM), kInvalidArgument (a = 1: bounds malformed). It uses no memory beyond
// its stack frame and reads each command word once: about 80 instructions per command
// on a Cortex-M55 (measured in bounds.cpp).
Status check_stream_bounds(const CommandStream& stream, const StreamBounds& bounds);

// The bounds of regions[0..count) on an NPU whose CONFIG register reads `config` (its
// SHRAM per core and its cores: two on an Ethos-U65-512).
StreamBounds bounds_for(uint32_t config, const RegionLimit* regions, int count);

struct RunOptions {
  uint32_t timeout_ms = 10000;  // wall time the CPU waits for the completion interrupt
  uint32_t regioncfg = 0;       // REGIONCFG: AXI port / memory type per region (2 bits each)
};

class Driver {
 public:
  // The driver for the NPU whose registers are at `base`. Soft-resets the NPU
  // (privileged, secure) and reads ID and CONFIG. kNpuNotFound when ID does not
  // read as an Ethos-U55/U65 (architecture major revision 1).
  static Result<Driver> create(uintptr_t base);

  Driver() = default;

  uint32_t id() const { return id_; }
  uint32_t config() const { return config_; }
  uint32_t macs_per_cycle() const;
  uint32_t shram_kib() const;
  // check_stream_bounds for this NPU (bounds_for its CONFIG) with regions[0..count).
  Status check_bounds(const CommandStream& stream, const RegionLimit* regions, int count) const;

  // Validates a COP1 payload (Vela's cmd_data) for this NPU: magic, driver
  // actions, lengths and bounds, then the product, MAC count, SHRAM size,
  // command stream version and architecture it was compiled for. Errors name
  // the stream's value (a) and the NPU's (b). `payload`: 16-byte aligned.
  Result<CommandStream> check(const void* payload, size_t size) const;

  // Runs `stream` with regions[0..count) as BASEP0..count-1 and returns the NPU's
  // PMU cycle count for the run; it does no cache maintenance (see kiln/cpu.h).
  // On a fault (kNpuFault: a = STATUS) or a timeout the NPU is reset before
  // returning. Call from thread mode with interrupts enabled (PRIMASK clear):
  // completion is signalled by the NPU interrupt, which runs at priority 0; for the
  // wait, SysTick is borrowed and BASEPRI raised to 0x80 (kiln::cpu::MillisecondTicks).
  // Errors: kInvalidArgument (a = 2, b = count outside 0..kRegions; a = 0: no stream),
  // kNpuBusy, kNpuFault, kNpuIncomplete, kNpuTimeout, kNpuResetFailed.
  Result<uint64_t> run(const CommandStream& stream, const Region* regions, int count,
                       const RunOptions& options = RunOptions()) const;

 private:
  explicit Driver(uintptr_t base) : base_(base) {}
  uint32_t read(uint32_t offset) const;
  void write(uint32_t offset, uint32_t value) const;
  Status soft_reset() const;
  void program(const CommandStream& stream, const Region* regions, int count,
               const RunOptions& options) const;
  Result<uint32_t> wait_for_completion(uint32_t timeout_ms) const;
  uint64_t read_cycle_counter() const;

  uintptr_t base_ = 0;
  uint32_t id_ = 0;
  uint32_t config_ = 0;
};

}  // namespace kiln::ethosu
