// Arm semihosting (BKPT 0xAB on M-profile): r0 = operation, r1 = parameter block.
// Honoured by QEMU (-semihosting-config enable=on) and Arm's FVPs
// (cpu0.semihosting-enable=1).
#include <cstdint>

#include "platform_internal.h"

namespace kiln::platform {
namespace {
constexpr uint32_t kSysExit = 0x18;
constexpr uint32_t kSysExitExtended = 0x20;
constexpr uint32_t kAdpStoppedApplicationExit = 0x20026;
constexpr uint32_t kAdpStoppedRunTimeErrorUnknown = 0x20023;

uint32_t semihost(uint32_t operation, const void* parameter) {
  register uint32_t r0 __asm("r0") = operation;
  register const void* r1 __asm("r1") = parameter;
  __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}
}  // namespace

void semihosting_exit(int status) {
  const uint32_t block[2] = {kAdpStoppedApplicationExit, static_cast<uint32_t>(status)};
  semihost(kSysExitExtended, block);
  // A host without SYS_EXIT_EXTENDED: plain SYS_EXIT (status reads 0 or 1).
  semihost(kSysExit, reinterpret_cast<const void*>(
                         status == 0 ? kAdpStoppedApplicationExit : kAdpStoppedRunTimeErrorUnknown));
  for (;;) __asm volatile("wfi");
}

}  // namespace kiln::platform
