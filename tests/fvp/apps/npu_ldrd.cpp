// Reads two NPU registers with one LDRD: the virtual platform's attachment only
// emulates single 32-bit LDR/STR and must stop the run saying so, not guess.
#include <cstdint>

#include "kiln/platform.h"
#include "kiln_board.h"

int main() {
  uint32_t low, high;
  const uint32_t base = KILN_NPU_BASE;
  __asm volatile("ldrd %0, %1, [%2]" : "=r"(low), "=r"(high) : "r"(base) : "memory");
  kiln::print("read %08x %08x\n", static_cast<unsigned>(low), static_cast<unsigned>(high));
  return 0;
}
