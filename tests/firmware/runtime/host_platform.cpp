// The host test build's stand-in for kiln's platform layer: the console (kiln::print)
// is the process's stdout. Only what the runtime and its error printer use.
#include <cstdarg>
#include <cstdio>

#include "kiln/platform.h"

namespace kiln {

void print(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

}  // namespace kiln
