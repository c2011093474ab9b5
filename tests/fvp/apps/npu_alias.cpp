// The NPU's registers through both of their addresses: the secure window the
// firmware uses (KILN_NPU_BASE) and the non-secure alias (KILN_NPU_NS_ALIAS).
// Reads ID through both, writes QBASE0 through the alias and reads it back through
// the secure window. Exit status 0 when both agree; 2 on a board without the alias.
#include <cstdint>

#include "kiln/ethosu/registers.h"
#include "kiln/platform.h"
#include "kiln_board.h"

namespace {

volatile uint32_t* reg(uintptr_t window, uint32_t offset) {
  return reinterpret_cast<volatile uint32_t*>(window + offset);
}

}  // namespace

int main() {
#ifndef KILN_NPU_NS_ALIAS
  kiln::print("this board describes no non-secure alias of the NPU\n");
  return 2;
#else
  const uint32_t id_secure = *reg(KILN_NPU_BASE, kiln::ethosu::reg::kId);
  const uint32_t id_alias = *reg(KILN_NPU_NS_ALIAS, kiln::ethosu::reg::kId);
  *reg(KILN_NPU_NS_ALIAS, kiln::ethosu::reg::kQbase0) = 0x1234'5670u;
  const uint32_t qbase = *reg(KILN_NPU_BASE, kiln::ethosu::reg::kQbase0);
  kiln::print("ID secure 0x%08x alias 0x%08x; QBASE0 written through the alias reads 0x%08x\n",
              static_cast<unsigned>(id_secure), static_cast<unsigned>(id_alias), static_cast<unsigned>(qbase));
  return id_secure == id_alias && qbase == 0x1234'5670u ? 0 : 1;
#endif
}
