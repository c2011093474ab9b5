// Reads the NPU's ID register many times through plain volatile loads, for the
// attachment's per-access cost (bench/virtual_platform.py) and to show every
// intercepted load returns the register's value. Prints how many reads returned
// the first value read; exit status 0 when all did.
#include <cstdint>

#include "kiln/ethosu/registers.h"
#include "kiln/platform.h"
#include "kiln_board.h"

constexpr unsigned kReads = 1000;

int main() {
  auto* id = reinterpret_cast<volatile uint32_t*>(KILN_NPU_BASE + kiln::ethosu::reg::kId);
  const uint32_t first = *id;
  unsigned same = 0;
  for (unsigned i = 0; i < kReads; ++i) same += *id == first ? 1 : 0;
  kiln::print("NPU ID 0x%08x read %u times, %u equal\n", static_cast<unsigned>(first), kReads, same);
  return same == kReads ? 0 : 1;
}
