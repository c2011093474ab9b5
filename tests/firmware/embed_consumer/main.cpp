// An application of its own board using kiln/kiln.h: the whole sequence of the API, linked
// against kiln's package with nothing of kiln's platform but the console over this sink.
#include <cstring>

#include "kiln/kiln.h"

extern "C" const uint8_t kiln_pte[], kiln_pte_end[];  // kiln_add_pte's default symbol

namespace {

constexpr uintptr_t kNpuBase = 0x40004000u;  // this board's
alignas(kiln::kBufferAlignment) uint8_t arena[64 * 1024];
kiln::MethodBuffers buffers;
kiln::Npu npu;
volatile char console_last;

kiln::Status run() {
  KILN_TRY(const kiln::Program program, kiln::Program::load(kiln_pte, static_cast<size_t>(kiln_pte_end - kiln_pte)));
  KILN_TRY(const kiln::MethodNeeds needs, kiln::method_needs(program, 0));
  KILN_CHECK(kiln::carve(needs, kiln::Span<uint8_t>(arena), {}, buffers));
  KILN_CHECK(npu.start(kNpuBase, buffers));
  KILN_TRY(kiln::Method method, kiln::Method::create(program, 0, buffers.memory, kiln::kKernelTable, npu.backends()));
  std::memset(method.input(0)->data, 0, method.input(0)->nbytes);
  return method.execute();
}

}  // namespace

// The board's console: kiln's characters (here kept, as a UART's data register would take them).
extern "C" void kiln_console_put(char c) { console_last = c; }

int main() {
  const kiln::Status status = run();
  if (!status.ok()) kiln::print_error(status.error());
  return status.ok() ? 0 : 1;
}
