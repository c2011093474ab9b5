// kiln's Ethos-U55/U65 driver: runs a Vela-compiled command stream on the NPU.
//
//   auto npu = kiln::ethosu::Driver::create(KILN_NPU_BASE);      // reads ID and CONFIG
//   auto stream = npu.value().check(payload, payload_size);       // validates the COP1 payload
//   kiln::ethosu::Region regions[] = {{weights, weights_size}, {arena, arena_size}};
//   // clean what the CPU wrote for the NPU (maintain_dcache below), then:
//   auto cycles = npu.value().run(stream.value(), regions, 2);    // NPU PMU cycles
//   // invalidate what the CPU reads back, then read it
//
// One stream runs at a time; run() blocks until the NPU's completion interrupt
// (or the timeout), so the driver owns the NPU interrupt (kiln_npu_irq_handler)
// while a Driver exists. No heap, no exceptions: every failure is an Error
// whose code names it (kiln/result.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/result.h"

namespace kiln::ethosu {

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

// D-cache maintenance for memory the CPU shares with the NPU (the NPU does not snoop
// the CPU's D-cache). run() does none: its caller keeps this contract, by address:
//  - before a run, every byte the NPU reads that the CPU wrote since it was last
//    cleaned is cleaned (constant data, such as the command stream and weights, once;
//    what the CPU writes per run, such as input tensors, before each run);
//  - no byte the NPU writes may be in a dirty line during or after the run (a
//    write-back would overwrite the NPU's data): memory the NPU writes is cleaned
//    once before its first use, and afterwards the CPU writes in it only what it then
//    cleans before the next run. Such memory should therefore start and end on
//    kDcacheLine boundaries, so no other object shares its lines;
//  - after the run, before the CPU reads bytes the NPU wrote, they are invalidated
//    (the CPU may hold stale copies, from earlier reads or speculative fills).
// Each call completes (DSB) before it returns. No-ops on a board without a D-cache
// (KILN_CPU_HAS_DCACHE 0 in kiln_board.h).
constexpr size_t kDcacheLine = 32;  // bytes: the D-cache line of the Cortex-M55 (and M7, M85)
enum class Cache : uint8_t {
  kClean,            // write dirty lines back (the NPU then reads what the CPU wrote)
  kInvalidate,       // drop lines, dirty or not (the CPU then reads what the NPU wrote)
  kCleanInvalidate,  // both
};
// Applies `op` to every line overlapping [begin, begin + size), and to no other line.
void maintain_dcache(Cache op, const void* begin, size_t size);

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

  // Validates a COP1 payload (Vela's cmd_data) for this NPU: magic, driver
  // actions, lengths and bounds, then the product, MAC count, SHRAM size,
  // command stream version and architecture it was compiled for. Errors name
  // the stream's value (a) and the NPU's (b). `payload`: 16-byte aligned.
  Result<CommandStream> check(const void* payload, size_t size) const;

  // Runs `stream` with regions[0..count) as BASEP0..count-1 and returns the NPU's
  // PMU cycle count for the run; it does no cache maintenance (see maintain_dcache).
  // On a fault (kNpuFault: a = STATUS) or a timeout the NPU is reset before
  // returning. Call from thread mode with interrupts enabled (PRIMASK clear):
  // completion is signalled by the NPU interrupt, which runs at priority 0; for the
  // wait, SysTick is borrowed and BASEPRI raised to 0x80.
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

// Prints `error` on one line ("NPU fault: STATUS=0x00000016 (bus_status, cmd_parse_error) ..."),
// naming the STATUS bits for NPU faults.
void print_error(const Error& error);

}  // namespace kiln::ethosu
