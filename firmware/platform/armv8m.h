// Armv8-M system control registers used by kiln's platform layer (architecture
// facts, the same on every board: Armv8-M Architecture Reference Manual, B11/D1).
#pragma once

#include <cstdint>

namespace kiln::armv8m {

inline volatile uint32_t& reg(uint32_t address) {
  return *reinterpret_cast<volatile uint32_t*>(static_cast<uintptr_t>(address));
}

constexpr uint32_t kVtor = 0xE000ED08;   // vector table offset
constexpr uint32_t kCcr = 0xE000ED14;    // configuration and control
constexpr uint32_t kShcsr = 0xE000ED24;  // system handler control and state
constexpr uint32_t kCfsr = 0xE000ED28;   // configurable fault status (MMFSR|BFSR|UFSR)
constexpr uint32_t kHfsr = 0xE000ED2C;   // HardFault status
constexpr uint32_t kMmfar = 0xE000ED34;  // MemManage fault address
constexpr uint32_t kBfar = 0xE000ED38;   // BusFault address
constexpr uint32_t kCpacr = 0xE000ED88;  // coprocessor access control
constexpr uint32_t kSfsr = 0xE000EDE4;   // SecureFault status
constexpr uint32_t kSfar = 0xE000EDE8;   // SecureFault address

constexpr uint32_t kCcrDiv0Trap = 1u << 4;
constexpr uint32_t kShcsrFaultsEnable = (1u << 16) | (1u << 17) | (1u << 18) | (1u << 19);
constexpr uint32_t kCpacrCp10Cp11Full = (3u << 20) | (3u << 22);  // FPU and MVE

inline void dsb() { __asm volatile("dsb" ::: "memory"); }
inline void isb() { __asm volatile("isb" ::: "memory"); }

}  // namespace kiln::armv8m
