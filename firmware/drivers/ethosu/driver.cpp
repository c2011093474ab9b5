// Driver: create, run, and the completion interrupt.
//
// Interrupt contract: run() enables the NPU interrupt (board's KILN_NPU_IRQ) at the
// highest priority; kiln_npu_irq_handler latches STATUS, clears the NPU's
// interrupt and marks the run done. While waiting, the CPU sleeps in WFE; a
// 1 ms SysTick (masked by BASEPRI, so its handler never runs; SEVONPEND turns
// its pending into a wake-up event) measures the timeout.
#include "kiln/ethosu/driver.h"

#include <cstdint>

#include "cortex_m.h"
#include "kiln/ethosu/registers.h"
#include "kiln/platform.h"
#include "kiln_board.h"

namespace kiln::ethosu {
namespace {

constexpr uint32_t kArchMajorU55U65 = 1;
constexpr uint32_t kResetPolls = 1000;
constexpr uint32_t kClockPower = reg::kCmdClockQEnable | reg::kCmdPowerQEnable;
constexpr uint32_t kProtPrivilegedSecure = reg::kResetPendingCplPrivileged;
// SysTick runs at the lowest priority and BASEPRI masks it; the NPU interrupt runs at 0.
constexpr uint32_t kSysTickPriority = 0xFF;
constexpr uint32_t kMaskBelow = 0x80;

// Shared with the interrupt handler; one run at a time.
volatile uintptr_t g_base = 0;
volatile uint32_t g_status = 0;
volatile bool g_done = false;

volatile uint32_t& npu_reg(uintptr_t base, uint32_t offset) { return armv8m::reg(base + offset); }

constexpr uint32_t kNpuIrqWord = 4 * (KILN_NPU_IRQ / 32);
constexpr uint32_t kNpuIrqBit = 1u << (KILN_NPU_IRQ % 32);

void nvic_enable_npu_irq() {
  using armv8m::reg;
  reg(cpu::kNvicIcpr + kNpuIrqWord) = kNpuIrqBit;
  *reinterpret_cast<volatile uint8_t*>(cpu::kNvicIpr + KILN_NPU_IRQ) = 0;
  reg(cpu::kNvicIser + kNpuIrqWord) = kNpuIrqBit;
}

// Outside run() the interrupt stays off, so the handler only ever sees a run's completion.
void nvic_disable_npu_irq() {
  armv8m::reg(cpu::kNvicIcer + kNpuIrqWord) = kNpuIrqBit;
  armv8m::dsb();
  armv8m::isb();
}

// SysTick as a 1 ms wake-up source that never runs its handler; restores what it changed.
class MillisecondTicks {
 public:
  MillisecondTicks()
      : scr_(armv8m::reg(cpu::kScr)), shpr3_(armv8m::reg(cpu::kShpr3)), basepri_(cpu::basepri()),
        syst_csr_(armv8m::reg(cpu::kSystCsr)), syst_rvr_(armv8m::reg(cpu::kSystRvr)) {
    using armv8m::reg;
    cpu::raise_basepri(kMaskBelow);
    reg(cpu::kShpr3) = (shpr3_ & 0x00FFFFFFu) | (kSysTickPriority << 24);
    reg(cpu::kScr) = scr_ | cpu::kScrSevonpend;
    reg(cpu::kSystRvr) = KILN_CPU_CLOCK_HZ / 1000 - 1;
    reg(cpu::kSystCvr) = 0;
    reg(cpu::kSystCsr) = cpu::kSystEnable | cpu::kSystTickint | cpu::kSystClkCpu;
  }
  ~MillisecondTicks() {
    using armv8m::reg;
    reg(cpu::kSystCsr) = 0;
    reg(cpu::kIcsr) = cpu::kIcsrPendstclr;
    reg(cpu::kSystRvr) = syst_rvr_;  // the app's SysTick, restarted from its reload value
    reg(cpu::kSystCvr) = 0;
    reg(cpu::kSystCsr) = syst_csr_ & (cpu::kSystEnable | cpu::kSystTickint | cpu::kSystClkCpu);
    reg(cpu::kScr) = scr_;
    reg(cpu::kShpr3) = shpr3_;
    cpu::set_basepri(basepri_);
  }
  // True once per elapsed millisecond.
  bool ticked() {
    using armv8m::reg;
    if (!(reg(cpu::kIcsr) & cpu::kIcsrPendstset)) return false;
    reg(cpu::kIcsr) = cpu::kIcsrPendstclr;
    return true;
  }

 private:
  uint32_t scr_, shpr3_, basepri_, syst_csr_, syst_rvr_;
};

const char* const kStatusBitNames[] = {
    "running", "irq_raised", "bus_status", "reset_status", "cmd_parse_error",
    "cmd_end_reached", "pmu_irq_raised", "wd_fault", "ecc_fault",
};

void print_status_bits(uint32_t status) {
  bool first = true;
  for (unsigned bit = 0; bit < sizeof(kStatusBitNames) / sizeof(kStatusBitNames[0]); ++bit) {
    if (!(status & (1u << bit))) continue;
    kiln::print("%s%s", first ? "" : ", ", kStatusBitNames[bit]);
    first = false;
  }
}

}  // namespace

extern "C" void kiln_npu_irq_handler() {
  const uintptr_t base = g_base;
  g_status = npu_reg(base, reg::kStatus);
  npu_reg(base, reg::kCmd) = kClockPower | reg::kCmdClearIrq;
  g_done = true;
}

void maintain_dcache(Cache op, const void* begin, size_t size) {
#if KILN_CPU_HAS_DCACHE
  const uint32_t reg = op == Cache::kClean ? cpu::kDccmvac
                       : op == Cache::kInvalidate ? cpu::kDcimvac : cpu::kDccimvac;
  cpu::dcache_by_line(reg, begin, static_cast<uint32_t>(size));
#else
  (void)op, (void)begin, (void)size;
#endif
}

uint32_t Driver::read(uint32_t offset) const { return npu_reg(base_, offset); }
void Driver::write(uint32_t offset, uint32_t value) const { npu_reg(base_, offset) = value; }

uint32_t Driver::macs_per_cycle() const { return 1u << reg::config_macs_log2(config_); }
uint32_t Driver::shram_kib() const { return reg::config_shram_kib(config_); }

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
  write(reg::kCmd, kClockPower);
  return {};
}

Result<Driver> Driver::create(uintptr_t base) {
  Driver driver(base);
  driver.id_ = driver.read(reg::kId);
  if (reg::id_arch_major(driver.id_) != kArchMajorU55U65) {
    return Error{ErrorCode::kNpuNotFound, driver.id_, static_cast<uint32_t>(base)};
  }
  Status reset = driver.soft_reset();
  if (!reset.ok()) return reset.error();
  driver.config_ = driver.read(reg::kConfig);
  return driver;
}

void Driver::program(const CommandStream& stream, const Region* regions, int count,
                     const RunOptions& options) const {
  write(reg::kRegioncfg, options.regioncfg);
  for (int n = 0; n < count; ++n) {
    const uint64_t address = reinterpret_cast<uintptr_t>(regions[n].base);
    write(reg::kBasep0 + 8 * n, static_cast<uint32_t>(address));
    write(reg::kBasep0 + 8 * n + 4, static_cast<uint32_t>(address >> 32));
  }
  write(reg::kPmcr, reg::kPmcrCntEn | reg::kPmcrCycleCntRst | reg::kPmcrEventCntRst);
  write(reg::kPmcntenset, reg::kPmuCycleCounter);
  write(reg::kQbase0, static_cast<uint32_t>(reinterpret_cast<uintptr_t>(stream.words)));
  write(reg::kQbase1, 0);
  write(reg::kQsize, stream.size_bytes);
}

Result<uint32_t> Driver::wait_for_completion(uint32_t timeout_ms) const {
  MillisecondTicks ticks;
  uint32_t elapsed_ms = 0;
  while (!g_done && elapsed_ms < timeout_ms) {
    cpu::wfe();
    if (ticks.ticked()) ++elapsed_ms;
  }
  if (!g_done) return Error{ErrorCode::kNpuTimeout, read(reg::kStatus), timeout_ms};
  return static_cast<uint32_t>(g_status);
}

uint64_t Driver::read_cycle_counter() const {
  uint32_t high = read(reg::kPmccntrHi);
  uint32_t low = read(reg::kPmccntrLo);
  const uint32_t again = read(reg::kPmccntrHi);
  if (again != high) {  // the low word wrapped between the reads
    high = again;
    low = read(reg::kPmccntrLo);
  }
  return (static_cast<uint64_t>(high & 0xFFFF) << 32) | low;
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
  nvic_enable_npu_irq();
  write(reg::kCmd, kClockPower | reg::kCmdTransitionToRunningState);
  Result<uint32_t> waited = wait_for_completion(options.timeout_ms);
  nvic_disable_npu_irq();

  if (!waited.ok()) {
    (void)soft_reset();
    return waited.error();
  }
  const uint32_t status = waited.value();
  if (status & reg::kStatusFaultBits) {
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

void print_error(const Error& error) {
  kiln::print("%s", error_name(error.code));
  const unsigned a = error.a, b = error.b;
  switch (error.code) {
    case ErrorCode::kNpuProductMismatch:
      kiln::print(": stream Ethos-U%s, NPU Ethos-U%s", a == 0 ? "55" : "65", b == 0 ? "55" : "65");
      break;
    case ErrorCode::kNpuMacsMismatch:
      kiln::print(": stream %u MACs/cycle, NPU %u MACs/cycle", a, b);
      break;
    case ErrorCode::kNpuShramMismatch:
      kiln::print(": stream %u KiB, NPU %u KiB", a, b);
      break;
    case ErrorCode::kNpuStreamVersionMismatch:
      kiln::print(": stream version %u, NPU version %u", a, b);
      break;
    case ErrorCode::kNpuArchMismatch:
      kiln::print(": stream %u.%u, NPU %u.%u", a >> 8, a & 0xFF, b >> 8, b & 0xFF);
      break;
    case ErrorCode::kNpuFault:
    case ErrorCode::kNpuIncomplete:
    case ErrorCode::kNpuBusy:
      kiln::print(": STATUS=0x%08x (", a);
      print_status_bits(a);
      kiln::print("), QREAD=%u", b);
      break;
    case ErrorCode::kNpuTimeout:
      kiln::print(": no completion interrupt within %u ms, STATUS=0x%08x (", b, a);
      print_status_bits(a);
      kiln::print(")");
      break;
    case ErrorCode::kNpuNotFound:
      kiln::print(": ID=0x%08x at 0x%08x", a, b);
      break;
    default:
      kiln::print(" (0x%08x, 0x%08x)", a, b);
  }
  kiln::print("\n");
}

}  // namespace kiln::ethosu
