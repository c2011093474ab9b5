// kiln/cpu.h: D-cache maintenance, NVIC, SysTick wake-ups and the DWT cycle counter.
#include "kiln/cpu.h"

#include "armv8m.h"
#include "kiln_board.h"

namespace kiln::cpu {
namespace {

using armv8m::reg;

constexpr uint32_t kSysTickPriority = 0xFF;  // the lowest
constexpr uint32_t kMaskFrom = 0x80;         // BASEPRI while waiting: masks SysTick, not priority 0

}  // namespace

void maintain_dcache(Cache op, const void* begin, size_t size) {
#if KILN_CPU_HAS_DCACHE
  if (size == 0) return;
  volatile uint32_t& target = reg(op == Cache::kClean        ? armv8m::kDccmvac
                                  : op == Cache::kInvalidate ? armv8m::kDcimvac
                                                             : armv8m::kDccimvac);
  const uint32_t first = reinterpret_cast<uintptr_t>(begin);
  uint32_t line = first & ~(kDcacheLine - 1);
  uint32_t lines = (first + size - line + kDcacheLine - 1) / kDcacheLine;
  armv8m::dsb();
  // Eight lines per iteration (a store and an add per line, and the loop's branches),
  // then one at a time. The empty asm keeps each add a 16-bit `adds`.
  for (; lines >= 8; lines -= 8) {
#pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) {
      target = line;
      line += kDcacheLine;
      __asm("" : "+l"(line));
    }
  }
  for (; lines != 0; --lines, line += kDcacheLine) target = line;
  armv8m::dsb();
#else
  (void)op, (void)begin, (void)size;
#endif
}

void enable_irq(unsigned irq, uint8_t priority) {
  const uint32_t word = 4 * (irq / 32), bit = 1u << (irq % 32);
  reg(armv8m::kNvicIcpr + word) = bit;
  *reinterpret_cast<volatile uint8_t*>(armv8m::kNvicIpr + irq) = priority;
  reg(armv8m::kNvicIser + word) = bit;
}

void disable_irq(unsigned irq) {
  reg(armv8m::kNvicIcer + 4 * (irq / 32)) = 1u << (irq % 32);
  armv8m::dsb();
  armv8m::isb();
}

MillisecondTicks::MillisecondTicks()
    : scr_(reg(armv8m::kScr)),
      shpr3_(reg(armv8m::kShpr3)),
      basepri_(armv8m::basepri()),
      syst_csr_(reg(armv8m::kSystCsr)),
      syst_rvr_(reg(armv8m::kSystRvr)) {
  armv8m::raise_basepri(kMaskFrom);
  reg(armv8m::kShpr3) = (shpr3_ & 0x00FFFFFFu) | (kSysTickPriority << 24);
  reg(armv8m::kScr) = scr_ | armv8m::kScrSevonpend;
  reg(armv8m::kSystRvr) = KILN_CPU_CLOCK_HZ / 1000 - 1;
  reg(armv8m::kSystCvr) = 0;
  reg(armv8m::kSystCsr) = armv8m::kSystEnable | armv8m::kSystTickint | armv8m::kSystClkCpu;
}

MillisecondTicks::~MillisecondTicks() {
  reg(armv8m::kSystCsr) = 0;
  reg(armv8m::kIcsr) = armv8m::kIcsrPendstclr;
  reg(armv8m::kSystRvr) = syst_rvr_;
  reg(armv8m::kSystCvr) = 0;
  reg(armv8m::kSystCsr) = syst_csr_ & (armv8m::kSystEnable | armv8m::kSystTickint | armv8m::kSystClkCpu);
  reg(armv8m::kScr) = scr_;
  reg(armv8m::kShpr3) = shpr3_;
  armv8m::set_basepri(basepri_);
}

bool MillisecondTicks::ticked() {
  if (!(reg(armv8m::kIcsr) & armv8m::kIcsrPendstset)) return false;
  reg(armv8m::kIcsr) = armv8m::kIcsrPendstclr;
  return true;
}

bool start_cycle_counter() {
  reg(armv8m::kDemcr) |= armv8m::kDemcrTrcena;
  reg(armv8m::kDwtCyccnt) = 0;
  reg(armv8m::kDwtCtrl) |= armv8m::kDwtCyccntena;
  const uint32_t first = cycle_count();
  for (volatile int i = 0; i < 16; i = i + 1) {
  }
  return cycle_count() != first;
}

uint32_t cycle_count() { return reg(armv8m::kDwtCyccnt); }

}  // namespace kiln::cpu
