// Recurses without bound: the stack limit (MSPLIM) must turn this into a
// reported UsageFault (STKOF), not silent corruption or a hang.
#include <cstdint>

#include "kiln/platform.h"

volatile uint32_t never = 0xFFFFFFFF;  // a depth the stack cannot reach

__attribute__((noinline)) uint32_t recurse(uint32_t depth) {
  volatile uint8_t frame[256];
  frame[0] = static_cast<uint8_t>(depth);
  if (depth == never) return frame[0];
  return recurse(depth + 1) + frame[0];
}

int main() {
  kiln::print("recursing without bound\n");
  return static_cast<int>(recurse(0));
}
