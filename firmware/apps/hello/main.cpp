// The first program kiln runs on a board: a greeting; proof that startup
// loaded .data, zeroed .bss and ran C++ static constructors; and one Helium
// (MVE, on a core that has it) and one FPU instruction, so a build without the
// coprocessors enabled faults here rather than later in a model.
#if defined(__ARM_FEATURE_MVE)
#include <arm_mve.h>
#endif

#include <cstdint>

#include "kiln/platform.h"
#include "kiln_board.h"

namespace {
volatile int loaded = 42;  // .data: copied from its load image by startup
volatile int zeroed;       // .bss: zeroed by startup

struct Constructed {
  // Reads a volatile, so the constructor must run at startup (.init_array).
  Constructed() : value(loaded + 1) {}
  int value;
};
Constructed constructed;

// One Helium instruction and its line; true when it computed the right sum. A core without
// Helium (Cortex-M4, M7, M33) says so and has nothing to check.
bool helium_works() {
#if defined(__ARM_FEATURE_MVE)
  int8_t values[16];
  for (int i = 0; i < 16; ++i) values[i] = static_cast<int8_t>(i + 1);
  const int8x16_t v = vld1q_s8(values);
  const int32_t dot = vmladavq_s8(v, v);  // 1^2 + ... + 16^2 = 1496
  kiln::print("Helium: sum of squares 1..16 = %d\n", static_cast<int>(dot));
  return dot == 1496;
#else
  kiln::print("Helium: none on %s\n", KILN_CPU_CORE);
  return true;
#endif
}
}  // namespace

int main() {
  kiln::print("Hello from kiln on %s (%s)\n", KILN_BOARD_NAME, KILN_CPU_CORE);
  kiln::print("startup: .data %d, .bss %d, static constructor %d\n", loaded, zeroed, constructed.value);

  const bool helium = helium_works();

  volatile float radius = 1.5f;
  const int scaled = static_cast<int>(radius * radius * 100.0f);  // 225
  kiln::print("FPU: 1.5 * 1.5 * 100 = %d\n", scaled);

  const bool started = loaded == 42 && zeroed == 0 && constructed.value == 43;
  return (started && helium && scaled == 225) ? 0 : 1;
}
