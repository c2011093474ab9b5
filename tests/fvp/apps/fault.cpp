// Reads an address nothing answers at: a precise BusFault the runner must report.
#include <cstdint>

#include "kiln/platform.h"

constexpr uintptr_t kUnmapped = 0x0C000000;  // between BRAM and DTCM: no memory, no device

int main() {
  kiln::print("about to read %08x\n", static_cast<unsigned>(kUnmapped));
  return static_cast<int>(*reinterpret_cast<volatile uint32_t*>(kUnmapped));
}
