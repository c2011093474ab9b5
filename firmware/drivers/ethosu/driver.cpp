// Driver: create, run, and the completion interrupt, for every family (reg::Family).
//
// Interrupt contract: run() enables the NPU interrupt (board's KILN_NPU_IRQ) at the
// highest priority; kiln_npu_irq_handler latches STATUS, clears the NPU's
// interrupt and marks the run done. While waiting, the CPU sleeps in WFE and the
// platform's 1 ms SysTick wake-ups (kiln::cpu::MillisecondTicks) measure the timeout.
#include "kiln/ethosu/driver.h"

#include <cstdint>

#include "kiln/cpu.h"
#include "kiln/ethosu/registers.h"
#include "kiln/runtime/try.h"
#include "kiln_board.h"

namespace kiln::ethosu {
namespace {

constexpr uint32_t kResetPolls = 1000;
constexpr uint32_t kClockPower = reg::kCmdClockQEnable | reg::kCmdPowerQEnable;
constexpr uint32_t kProtPrivilegedSecure = reg::kResetPendingCplPrivileged;
constexpr uint8_t kNpuIrqPriority = 0;  // the highest: it runs under MillisecondTicks' BASEPRI
// Addresses past 32 bits: only then does program() write the high words of BASEPn and QBASE.
constexpr bool kWideAddresses = sizeof(uintptr_t) > 4;

// Shared with the interrupt handler; one run at a time.
volatile uintptr_t g_base = 0;
volatile uint32_t g_status = 0;
volatile bool g_done = false;

volatile uint32_t& npu_reg(uintptr_t base, uint32_t offset) {
  return *reinterpret_cast<volatile uint32_t*>(base + offset);
}

// The family of this driver's NPU: create() refused any CONFIG without one, so a Driver's
// config_ always has a family; a default-constructed Driver (config 0) reads as an Ethos-U55.
const reg::Family& family(uint32_t config) {
  const reg::Family* f = reg::family_of(config);
  return f != nullptr ? *f : reg::kFamilies[0];
}

}  // namespace

// The buffers of the run in progress: word 0 the number of regions given to run(), then
// each region's size in bytes (BASEP<n> holds its base). The Ethos-U55/U65 have no region
// size registers, so this is how a debugger, and kiln's virtual platform, learn them: the
// platform's NPU model reads this symbol at each start and refuses any access outside
// [BASEP<n>, BASEP<n> + size) (kiln.simulator.attach). Written by run() before the start.
extern "C" {
volatile uint32_t kiln_npu_region_sizes[1 + reg::kRegions];
}

extern "C" void kiln_npu_irq_handler() {
  const uintptr_t base = g_base;
  g_status = npu_reg(base, reg::kStatus);
  npu_reg(base, reg::kCmd) = kClockPower | reg::kCmdClearIrq;
  g_done = true;
}

uint32_t Driver::read(uint32_t offset) const { return npu_reg(base_, offset); }
void Driver::write(uint32_t offset, uint32_t value) const { npu_reg(base_, offset) = value; }

uint32_t Driver::status() const { return read(reg::kStatus); }

uint32_t Driver::macs_per_cycle() const { return 1u << reg::config_macs_log2(config_); }
uint32_t Driver::shram_kib() const { return family(config_).shram_in_config ? reg::config_shram_kib(config_) : 0; }

Status Driver::soft_reset() const {
  write(reg::kReset, kProtPrivilegedSecure);
  uint32_t status = read(reg::kStatus);
  for (uint32_t i = 0; (status & reg::kStatusResetStatus) && i < kResetPolls; ++i) {
    status = read(reg::kStatus);
  }
  const uint32_t prot = read(reg::kProt);
  if ((status & reg::kStatusResetStatus) || prot != kProtPrivilegedSecure) {
    return Error{ErrorCode::kNpuResetFailed, status, prot};
  }
  // A reset returns the memory attributes and AXI limits to their reset values: set them again.
  for (const reg::RegisterValue& w : family(config_).bring_up) {
    if (w.offset != 0) write(w.offset, w.value);
  }
  keep_pmu_set_up();  // so that every run, the first too, finds it set up
  if constexpr (!kWideAddresses) {  // program() leaves the high words as this sets them
    for (int n = 0; n < reg::kRegions; ++n) write(reg::kBasep0 + 8 * n + 4, 0);
    write(reg::kQbase1, 0);
  }
  write(reg::kCmd, kClockPower);
  return {};
}

void Driver::keep_pmu_set_up() const {
  // The event counters' types and enables hold from run to run unless the NPU was reset or
  // powered down in between: one read of the enables says whether to set them (a counter without
  // an event counts kEventNone: nothing).
  const reg::Family& f = family(config_);
  uint32_t enabled = reg::kPmuCycleCounter;
  for (uint32_t n = 0; n < f.event_counters; ++n) {
    if (f.pmu_events[n] != reg::kNotCounted) enabled |= 1u << n;
  }
  if (read(f.pmu_offset + reg::kPmcntenset) == enabled) return;
  for (uint32_t n = 0; n < f.event_counters; ++n) {
    const reg::CountedEvent e = f.pmu_events[n];
    write(f.pmu_offset + reg::kPmevtyper0 + 4 * n,
          e == reg::kNotCounted ? reg::kEventNone : reg::kCountedEventTypes[e]);
  }
  write(f.pmu_offset + reg::kPmcntenset, enabled);
}

Result<Driver> Driver::create(uintptr_t base) {
  Driver driver(base);
  driver.id_ = driver.read(reg::kId);
  driver.config_ = driver.read(reg::kConfig);  // read-only: a reset does not change it
  const reg::Family* f = reg::family_of(driver.config_);
  if (f == nullptr || reg::id_arch_major(driver.id_) != f->arch_major) {
    return Error{ErrorCode::kNpuNotFound, driver.id_, static_cast<uint32_t>(base)};
  }
  KILN_CHECK(driver.soft_reset());
  return driver;
}

void Driver::program(const CommandStream& stream, const Region* regions, int count, const RunOptions& options) const {
  write(reg::kRegioncfg, options.regioncfg);
  kiln_npu_region_sizes[0] = static_cast<uint32_t>(count);
  for (int n = 0; n < count; ++n) {  // 40-bit addresses: the high word is 0 from a 32-bit CPU (soft_reset)
    const uint64_t address = reinterpret_cast<uintptr_t>(regions[n].base);
    write(reg::kBasep0 + 8 * n, static_cast<uint32_t>(address));
    if constexpr (kWideAddresses) write(reg::kBasep0 + 8 * n + 4, static_cast<uint32_t>(address >> 32));
    kiln_npu_region_sizes[1 + n] = static_cast<uint32_t>(regions[n].size);
  }
  // The cycle counter and the family's event counters, from 0.
  keep_pmu_set_up();
  const reg::Family& f = family(config_);
  write(f.pmu_offset + reg::kPmcr, reg::kPmcrCntEn | reg::kPmcrCycleCntRst | reg::kPmcrEventCntRst);
  const uint64_t qbase = reinterpret_cast<uintptr_t>(stream.words);
  write(reg::kQbase0, static_cast<uint32_t>(qbase));
  if constexpr (kWideAddresses) write(reg::kQbase1, static_cast<uint32_t>(qbase >> 32));
  write(reg::kQsize, stream.size_bytes);
}

Result<uint32_t> Driver::wait_for_completion(uint32_t timeout_ms) const {
  cpu::MillisecondTicks ticks;
  uint32_t elapsed_ms = 0;
  while (!g_done && elapsed_ms < timeout_ms) {
    cpu::wait_for_event();
    if (ticks.ticked()) ++elapsed_ms;
  }
  if (!g_done) return Error{ErrorCode::kNpuTimeout, read(reg::kStatus), timeout_ms};
  return static_cast<uint32_t>(g_status);
}

uint64_t Driver::read_cycle_counter() const {
  const uint32_t pmu = family(config_).pmu_offset;
  uint32_t high = read(pmu + reg::kPmccntrHi);
  uint32_t low = read(pmu + reg::kPmccntrLo);
  const uint32_t again = read(pmu + reg::kPmccntrHi);
  if (again != high) {  // the low word wrapped between the reads
    high = again;
    low = read(pmu + reg::kPmccntrLo);
  }
  return (static_cast<uint64_t>(high & 0xFFFF) << 32) | low;
}

PmuCounts Driver::pmu_counts(uint64_t total) const {
  const reg::Family& f = family(config_);
  PmuCounts counts;
  counts.total = total;
  for (uint32_t n = 0; n < f.event_counters; ++n) {
    const reg::CountedEvent e = f.pmu_events[n];
    if (e == reg::kNotCounted) continue;
    counts.events[e] = read(f.pmu_offset + reg::kPmevcntr0 + 4 * n);
    counts.counted |= 1u << e;
  }
  if (!(counts.counted & (1u << PmuCounts::kActive))) {
    const uint64_t idle = counts.events[PmuCounts::kIdle];
    counts.events[PmuCounts::kActive] = counts.total > idle ? counts.total - idle : 0;
  }
  return counts;
}

Result<uint64_t> Driver::run(const CommandStream& stream, const Region* regions, int count,
                             const RunOptions& options) const {
  if (count < 0 || count > reg::kRegions) {
    return Error{ErrorCode::kInvalidArgument, 2, static_cast<uint32_t>(count)};
  }
  if (stream.words == nullptr) return Error{ErrorCode::kInvalidArgument, 0, 0};
  const uint32_t before = read(reg::kStatus);
  if (before & reg::kStatusRunning) return Error{ErrorCode::kNpuBusy, before, read(reg::kQread)};

  program(stream, regions, count, options);
  g_base = base_;
  g_done = false;
  cpu::enable_irq(KILN_NPU_IRQ, kNpuIrqPriority);
  write(reg::kCmd, kClockPower | reg::kCmdTransitionToRunningState);
  Result<uint32_t> waited = wait_for_completion(options.timeout_ms);
  cpu::disable_irq(KILN_NPU_IRQ);  // outside run() the handler never runs

  if (!waited.ok()) {
    (void)soft_reset();
    return waited.error();
  }
  const uint32_t status = waited.value();
  if (status & family(config_).fault_bits) {
    const uint32_t qread = read(reg::kQread);
    (void)soft_reset();
    return Error{ErrorCode::kNpuFault, status, qread};
  }
  if (!(status & reg::kStatusCmdEndReached)) {
    const uint32_t qread = read(reg::kQread);
    (void)soft_reset();  // it may still be running: stop it before its buffers are reused
    return Error{ErrorCode::kNpuIncomplete, status, qread};
  }
  return read_cycle_counter();
}

}  // namespace kiln::ethosu
