// Runs kiln's int8 dot product (firmware/runtime/kernels/dot.h) bare-metal on QEMU and prints,
// over semihosting, the code path it was built with and each case's sums in hex:
//   path=<helium|dsp|plain>
//   <n> <sum of x w> <sum of x> <sum of w>
// The cases come from vectors.h (written by tests/firmware/runtime/test_dot_paths.py). Only
// const data and the stack are used, so nothing needs copying at reset.
#include <cstddef>
#include <cstdint>

#include "dot.h"
#include "vectors.h"  // kCases[kCaseCount]: {x, w, n}

extern "C" {
extern uint32_t __stack_top;  // link.ld
[[noreturn]] void reset();

// Freestanding: what the compiler may call for dot.h's word loads.
void* memcpy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  while (n-- != 0) *d++ = *s++;
  return dst;
}
}

namespace {

// ARM semihosting: operation in r0, its argument in r1, through BKPT 0xAB.
void semihost(uint32_t op, const void* arg) {
  register uint32_t r0 asm("r0") = op;
  register const void* r1 asm("r1") = arg;
  asm volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
}

constexpr uint32_t kWrite0 = 0x04, kExit = 0x18;
constexpr uintptr_t kApplicationExit = 0x20026;  // ADP_Stopped_ApplicationExit: exit status 0

char* put_hex(char* out, uint32_t v) {
  for (int shift = 28; shift >= 0; shift -= 4) *out++ = "0123456789abcdef"[(v >> shift) & 0xF];
  *out++ = ' ';
  return out;
}

}  // namespace

extern "C" [[noreturn]] void reset() {
  // Full access to the coprocessors 10 and 11 (the FPU, and Helium's registers on the M55).
  *reinterpret_cast<volatile uint32_t*>(0xE000ED88) |= 0xFu << 20;
  asm volatile("dsb\n isb" ::: "memory");
  semihost(kWrite0, "path=" KILN_DOT_PATH "\n");
  for (const auto& c : kCases) {
    const kiln::runtime::kernels::DotSums s = kiln::runtime::kernels::dot_sums(c.x, c.w, c.n);
    char line[48];
    char* end = put_hex(put_hex(put_hex(put_hex(line, static_cast<uint32_t>(c.n)), s.xw), s.x), s.w);
    end[-1] = '\n';
    *end = '\0';
    semihost(kWrite0, line);
  }
  semihost(kExit, reinterpret_cast<const void*>(kApplicationExit));
  for (;;) {
  }
}

__attribute__((section(".vectors"), used))
const void* const kVectors[2] = {&__stack_top, reinterpret_cast<const void*>(&reset)};
