// Calls kiln_insn_loop (loop.s) once per number on the semihosting command line
// after the program's name (none: 1 7 1000) and prints each result, for the
// instruction-count plugin's test: each call executes exactly 3 * n + 3 instructions.
#include <cstdint>

#include "kiln/host_file.h"
#include "kiln/platform.h"

extern "C" uint32_t kiln_insn_loop(uint32_t n);

namespace {

// Runs kiln_insn_loop for each number in `p` (space-separated); -1 on a bad number,
// else how many ran.
int run_each(const char* p) {
  int calls = 0;
  while (*p != '\0') {
    if (*p == ' ') {
      ++p;
      continue;
    }
    uint32_t n = 0;
    for (; *p >= '0' && *p <= '9'; ++p) n = n <= 1000000 ? 10 * n + uint32_t(*p - '0') : n;
    if (n == 0 || n > 1000000 || (*p != ' ' && *p != '\0')) {
      kiln::print("insn_count: each argument must be a number 1..1000000\n");
      return -1;
    }
    kiln::print("kiln_insn_loop(%u) = %u\n", unsigned(n), unsigned(kiln_insn_loop(n)));
    ++calls;
  }
  return calls;
}

}  // namespace

int main() {
  static char line[256];
  const char* args = "";
  if (kiln::command_line(line, sizeof(line))) {
    args = line;
    while (*args != '\0' && *args != ' ') ++args;  // the program's name
  }
  for (const char* p = args; *p != '\0'; ++p) {
    if (*p != ' ') return run_each(args) < 0 ? 2 : 0;
  }
  return run_each("1 7 1000") < 0 ? 2 : 0;
}
