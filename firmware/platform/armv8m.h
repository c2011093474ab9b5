// Armv8-M system registers used by kiln's platform layer (architecture facts, the
// same on every board: Armv8-M Architecture Reference Manual, B11 "NVIC" and
// "SysTick", D1 system control and cache maintenance, and the DWT of the Cortex-M55
// and M85). Internal to the platform layer: others use kiln/cpu.h.
#pragma once

#include <cstdint>

namespace kiln::armv8m {

inline volatile uint32_t& reg(uint32_t address) {
  return *reinterpret_cast<volatile uint32_t*>(static_cast<uintptr_t>(address));
}

constexpr uint32_t kSystCsr = 0xE000E010;  // SysTick control and status
constexpr uint32_t kSystRvr = 0xE000E014;  // SysTick reload value (24 bits)
constexpr uint32_t kSystCvr = 0xE000E018;  // SysTick current value
constexpr uint32_t kNvicIser = 0xE000E100; // NVIC set-enable, one bit per interrupt, 32 per word
constexpr uint32_t kNvicIcer = 0xE000E180; // NVIC clear-enable
constexpr uint32_t kNvicIcpr = 0xE000E280; // NVIC clear-pending
constexpr uint32_t kNvicIpr = 0xE000E400;  // NVIC priority, one byte per interrupt
constexpr uint32_t kIcsr = 0xE000ED04;   // interrupt control and state
constexpr uint32_t kVtor = 0xE000ED08;   // vector table offset
constexpr uint32_t kScr = 0xE000ED10;    // system control
constexpr uint32_t kCcr = 0xE000ED14;    // configuration and control
constexpr uint32_t kShpr3 = 0xE000ED20;  // system handler priority 3: SysTick in bits 31..24
constexpr uint32_t kShcsr = 0xE000ED24;  // system handler control and state
constexpr uint32_t kCfsr = 0xE000ED28;   // configurable fault status (MMFSR|BFSR|UFSR)
constexpr uint32_t kHfsr = 0xE000ED2C;   // HardFault status
constexpr uint32_t kMmfar = 0xE000ED34;  // MemManage fault address
constexpr uint32_t kBfar = 0xE000ED38;   // BusFault address
constexpr uint32_t kCpacr = 0xE000ED88;  // coprocessor access control
constexpr uint32_t kSfsr = 0xE000EDE4;   // SecureFault status
constexpr uint32_t kSfar = 0xE000EDE8;   // SecureFault address
constexpr uint32_t kDemcr = 0xE000EDFC;  // debug exception and monitor control
constexpr uint32_t kDcimvac = 0xE000EF5C;   // D-cache invalidate by address to PoC
constexpr uint32_t kDccmvac = 0xE000EF68;   // D-cache clean by address to PoC
constexpr uint32_t kDccimvac = 0xE000EF70;  // D-cache clean and invalidate by address to PoC
constexpr uint32_t kDwtCtrl = 0xE0001000;   // DWT control
constexpr uint32_t kDwtCyccnt = 0xE0001004; // DWT cycle count

constexpr uint32_t kCcrDiv0Trap = 1u << 4;
constexpr uint32_t kShcsrFaultsEnable = (1u << 16) | (1u << 17) | (1u << 18) | (1u << 19);
constexpr uint32_t kCpacrCp10Cp11Full = (3u << 20) | (3u << 22);  // FPU and MVE
constexpr uint32_t kIcsrPendstset = 1u << 26;
constexpr uint32_t kIcsrPendstclr = 1u << 25;
constexpr uint32_t kScrSevonpend = 1u << 4;
constexpr uint32_t kSystEnable = 1u << 0;
constexpr uint32_t kSystTickint = 1u << 1;
constexpr uint32_t kSystClkCpu = 1u << 2;
constexpr uint32_t kDemcrTrcena = 1u << 24;
constexpr uint32_t kDwtCyccntena = 1u << 0;

// The main stack's limit register (MSPLIM) and the SecureFault registers are Armv8-M
// Mainline's; kiln also builds for Armv7-M cores (Cortex-M4, M7), which have neither.
#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
#define KILN_ARMV8M_MAIN 1
#define KILN_CLEAR_MSPLIM "movs r2, #0 \n msr msplim, r2 \n"  // for naked functions
#else
#define KILN_ARMV8M_MAIN 0
#define KILN_CLEAR_MSPLIM ""
#endif
constexpr bool kArmv8mMain = KILN_ARMV8M_MAIN;

inline void set_msplim(uint32_t limit) {
#if KILN_ARMV8M_MAIN
  __asm volatile("msr msplim, %0" ::"r"(limit));
#else
  (void)limit;
#endif
}

inline void dsb() { __asm volatile("dsb" ::: "memory"); }
inline void isb() { __asm volatile("isb" ::: "memory"); }

inline uint32_t basepri() {
  uint32_t value;
  __asm volatile("mrs %0, basepri" : "=r"(value));
  return value;
}
inline void set_basepri(uint32_t value) { __asm volatile("msr basepri, %0" ::"r"(value) : "memory"); }
// Raises the masking priority to `value` unless BASEPRI already masks more.
inline void raise_basepri(uint32_t value) { __asm volatile("msr basepri_max, %0" ::"r"(value) : "memory"); }

}  // namespace kiln::armv8m
