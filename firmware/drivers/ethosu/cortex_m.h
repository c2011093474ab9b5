// The Armv8-M system registers the NPU driver uses beyond the platform layer's
// (Armv8-M ARM B11 "NVIC", B11 "SysTick", D1 "Cache maintenance"). Facts of the
// architecture, the same on every board.
#pragma once

#include <cstdint>

#include "armv8m.h"
#include "kiln/ethosu/driver.h"

namespace kiln::ethosu::cpu {

constexpr uint32_t kNvicIser = 0xE000E100;  // set-enable, one bit per interrupt, 32 per word
constexpr uint32_t kNvicIcer = 0xE000E180;  // clear-enable
constexpr uint32_t kNvicIcpr = 0xE000E280;  // clear-pending
constexpr uint32_t kNvicIpr = 0xE000E400;   // priority, one byte per interrupt
constexpr uint32_t kIcsr = 0xE000ED04;      // interrupt control and state
constexpr uint32_t kScr = 0xE000ED10;       // system control
constexpr uint32_t kShpr3 = 0xE000ED20;     // SysTick priority in bits 31..24
constexpr uint32_t kSystCsr = 0xE000E010;   // SysTick control and status
constexpr uint32_t kSystRvr = 0xE000E014;   // reload value (24 bits)
constexpr uint32_t kSystCvr = 0xE000E018;   // current value
constexpr uint32_t kDcimvac = 0xE000EF5C;   // D-cache invalidate by address to PoC
constexpr uint32_t kDccmvac = 0xE000EF68;   // D-cache clean by address to PoC
constexpr uint32_t kDccimvac = 0xE000EF70;  // D-cache clean and invalidate by address to PoC
constexpr uint32_t kCacheLine = kDcacheLine;

constexpr uint32_t kIcsrPendstset = 1u << 26;
constexpr uint32_t kIcsrPendstclr = 1u << 25;
constexpr uint32_t kScrSevonpend = 1u << 4;
constexpr uint32_t kSystEnable = 1u << 0;
constexpr uint32_t kSystTickint = 1u << 1;
constexpr uint32_t kSystClkCpu = 1u << 2;

inline uint32_t basepri() {
  uint32_t value;
  __asm volatile("mrs %0, basepri" : "=r"(value));
  return value;
}
inline void set_basepri(uint32_t value) {
  __asm volatile("msr basepri, %0" ::"r"(value) : "memory");
}
// Raises the masking priority to `value` unless BASEPRI already masks more.
inline void raise_basepri(uint32_t value) {
  __asm volatile("msr basepri_max, %0" ::"r"(value) : "memory");
}
inline void wfe() { __asm volatile("wfe" ::: "memory"); }

// Applies `op` (kDccmvac, kDcimvac or kDccimvac) to every D-cache line overlapping
// [begin, begin + size), and to no other line: invalidating a line past the range
// could drop another object's dirty data. The DSB before orders the CPU's earlier
// stores before the maintenance; the DSB after completes it before anything the
// caller does next (e.g. starting the NPU, or reading what it wrote).
inline void dcache_by_line(uint32_t op, const void* begin, uint32_t size) {
  if (size == 0) return;
  volatile uint32_t& target = armv8m::reg(op);
  const uint32_t first = reinterpret_cast<uintptr_t>(begin);
  uint32_t line = first & ~(kCacheLine - 1);
  uint32_t lines = (first + size - line + kCacheLine - 1) / kCacheLine;
  armv8m::dsb();
  // Eight lines per iteration (a store and an add per line, and the loop's branches),
  // then one at a time. The empty asm keeps each add a 16-bit `adds`.
  for (; lines >= 8; lines -= 8) {
#pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) {
      target = line;
      line += kCacheLine;
      __asm("" : "+l"(line));
    }
  }
  for (; lines != 0; --lines, line += kCacheLine) target = line;
  armv8m::dsb();
}

}  // namespace kiln::ethosu::cpu
