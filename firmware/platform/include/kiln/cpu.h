// The CPU services of kiln's platform layer that drivers and apps share: D-cache
// maintenance, NVIC interrupt enable, SysTick as a millisecond wake-up, and the DWT
// cycle counter. Facts of the Armv8-M architecture, the same on every board; what a
// board lacks (KILN_CPU_HAS_DCACHE 0, no DWT) is handled here, not by the caller.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::cpu {

// --- D-cache ------------------------------------------------------------------------
//
// Maintenance for memory the CPU shares with a bus master that does not snoop the
// CPU's D-cache (the Ethos-U NPU). The caller keeps this contract, by address:
//  - before the master reads, every byte it reads that the CPU wrote since it was last
//    cleaned is cleaned (constant data once; what the CPU writes per use, before each use);
//  - no byte the master writes may be in a dirty line while or after it writes (a
//    write-back would overwrite its data): memory it writes is cleaned once before its
//    first use, and afterwards the CPU writes in it only what it then cleans before
//    the next use. Such memory should therefore start and end on kDcacheLine
//    boundaries, so no other object shares its lines;
//  - after the master wrote, before the CPU reads those bytes, they are invalidated
//    (the CPU may hold stale copies, from earlier reads or speculative fills).
constexpr size_t kDcacheLine = 32;  // bytes: the D-cache line of the Cortex-M55 (and M7, M85)
enum class Cache : uint8_t {
  kClean,            // write dirty lines back (the master then reads what the CPU wrote)
  kInvalidate,       // drop lines, dirty or not (the CPU then reads what the master wrote)
  kCleanInvalidate,  // both
};
// Applies `op` to every line overlapping [begin, begin + size), and to no other line
// (invalidating a line past the range could drop another object's dirty data). A DSB
// before orders the CPU's earlier stores before it; a DSB after completes it before
// the caller's next access (e.g. starting the NPU). No-op on a board without a D-cache.
void maintain_dcache(Cache op, const void* begin, size_t size);

// --- Interrupts ---------------------------------------------------------------------

// Clears external interrupt `irq`'s pending bit, gives it `priority` (0 = highest;
// the priority byte as the NVIC stores it) and enables it.
void enable_irq(unsigned irq, uint8_t priority);
// Disables external interrupt `irq`; when it returns, its handler no longer runs.
void disable_irq(unsigned irq);

// Sleeps until an event: an interrupt, a pending interrupt with SEVONPEND set, or SEV.
inline void wait_for_event() { __asm volatile("wfe" ::: "memory"); }

// SysTick as a 1 ms wake-up source whose handler never runs, for waiting with
// wait_for_event. While one exists: SysTick counts milliseconds of the board's CPU
// clock (KILN_CPU_CLOCK_HZ) at the lowest priority (0xFF); BASEPRI is raised to 0x80
// (unless it already masks more), so no exception with a priority value of 0x80 or
// more runs (SysTick's handler among them) while those below it do (e.g. an interrupt
// enabled with enable_irq(irq, 0)); SEVONPEND turns the pending SysTick into a wake-up
// event. Its destructor restores SysTick, SCR, SHPR3 and BASEPRI as they were (an
// app's own SysTick restarts from its reload value). Thread mode only; one at a time.
class MillisecondTicks {
 public:
  MillisecondTicks();
  ~MillisecondTicks();
  MillisecondTicks(const MillisecondTicks&) = delete;
  MillisecondTicks& operator=(const MillisecondTicks&) = delete;
  // True once per elapsed millisecond (it consumes the SysTick pending bit).
  bool ticked();

 private:
  uint32_t scr_, shpr3_, basepri_, syst_csr_, syst_rvr_;
};

// --- Cycle counter ------------------------------------------------------------------

// Starts the DWT cycle counter from 0; false where it does not count (kiln's virtual
// platform does not model the DWT): cycle_count() then returns a constant.
bool start_cycle_counter();
// CPU cycles since start_cycle_counter (wraps at 2^32).
uint32_t cycle_count();

}  // namespace kiln::cpu
