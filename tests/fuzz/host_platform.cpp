// The fuzzers' stand-in for kiln's platform layer (kiln/platform.h, kiln/cpu.h): what the
// runtime, its error printer and the Ethos-U delegate call. The console formats each line
// into a buffer and drops it (so the printer's arguments are still formatted, but a run of
// millions of failing inputs prints nothing); the host has no D-cache to maintain.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "kiln/cpu.h"
#include "kiln/platform.h"

namespace kiln {

void write(const char*, std::size_t) {}

void print(const char* format, ...) {
  char line[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
}

void exit(int status) { std::_Exit(status); }

namespace cpu {

// Every byte the delegate maintains must exist: touching the first and last byte lets
// AddressSanitizer see a range outside its buffer.
void maintain_dcache(Cache, const void* begin, size_t size) {
  if (size == 0) return;
  const volatile uint8_t* bytes = static_cast<const volatile uint8_t*>(begin);
  (void)bytes[0];
  (void)bytes[size - 1];
}

}  // namespace cpu
}  // namespace kiln
