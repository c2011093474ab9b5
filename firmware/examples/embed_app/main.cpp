// An application's own firmware running a kiln program through kiln/kiln.h: load the .pte baked
// into the image, carve the method's memory out of one arena, start the Ethos-U, set the inputs,
// execute, print the outputs. Prints, then exits 0 (1 on a failure, after the error's line):
//   embed_app: <m> inputs, <n> outputs, arena <bytes> of <bytes> bytes, fast scratch <bytes> of <bytes> bytes
//   output <i>: <nbytes> bytes: <hex bytes, in memory order>
#include <cstring>

#include "kiln/kiln.h"
#include "kiln/platform.h"  // kiln::print: kiln::board's UART console
#include "kiln_board.h"     // KILN_NPU_BASE, KILN_PLACE_BSS: kiln::board's header for this board

// The program and one input sample, baked in by kiln_add_pte (CMakeLists.txt).
extern "C" const uint8_t app_model[], app_model_end[];
extern "C" const uint8_t app_input[], app_input_end[];

namespace {

constexpr size_t kArenaBytes = APP_ARENA_BYTES;            // CMakeLists.txt
constexpr size_t kFastArenaBytes = APP_FAST_ARENA_BYTES;   // CMakeLists.txt
// Where the NPU reaches them (the board's default .bss, DTCM, it does not): the arena in DDR, the
// fast arena (the fast scratch of a Dedicated_Sram program, e.g. ethos-u65-256's) in SRAM.
alignas(kiln::kBufferAlignment) KILN_PLACE_BSS(ddr) uint8_t arena[kArenaBytes];
alignas(kiln::kBufferAlignment) KILN_PLACE_BSS(sram) uint8_t fast_arena[kFastArenaBytes];
kiln::MethodBuffers buffers;  // static: the Method points into it
kiln::Npu npu;                // static: the backend points into it

void print_bytes(const void* data, size_t size) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) kiln::print("%02x", bytes[i]);
}

kiln::Status run() {
  KILN_TRY(const kiln::Program program, kiln::Program::load(app_model, static_cast<size_t>(app_model_end - app_model)));
  KILN_TRY(const kiln::MethodNeeds needs, kiln::method_needs(program, 0));
  KILN_CHECK(kiln::carve(needs, kiln::Span<uint8_t>(arena), kiln::Span<uint8_t>(fast_arena), buffers));
  if (needs.delegates > 0) KILN_CHECK(npu.start(KILN_NPU_BASE, buffers));
  KILN_TRY(kiln::Method method, kiln::Method::create(program, 0, buffers.memory, kiln::kKernelTable, npu.backends()));
  kiln::print("embed_app: %u inputs, %u outputs, arena %u of %u bytes, fast scratch %u of %u bytes\n",
              unsigned(method.input_count()), unsigned(method.output_count()), unsigned(needs.arena_bytes()),
              unsigned(kArenaBytes), unsigned(needs.npu_fast_scratch), unsigned(kFastArenaBytes));

  // Inputs: the sample's bytes in input order (written before every execute(): it consumes them).
  const uint8_t* sample = app_input;
  const size_t sample_bytes = static_cast<size_t>(app_input_end - app_input);
  for (size_t i = 0; i < method.input_count(); ++i) {
    kiln::Tensor* input = method.input(i);
    if (sample + input->nbytes > app_input + sample_bytes) {
      return kiln::Error{kiln::ErrorCode::kInvalidArgument, uint32_t(i), uint32_t(sample_bytes)};
    }
    std::memcpy(input->data, sample, input->nbytes);
    sample += input->nbytes;
  }
  KILN_CHECK(method.execute());
  for (size_t i = 0; i < method.output_count(); ++i) {
    const kiln::Tensor* output = method.output(i);
    kiln::print("output %u: %u bytes: ", unsigned(i), unsigned(output->nbytes));
    print_bytes(output->data, output->nbytes);
    kiln::print("\n");
  }
  return kiln::Status();
}

}  // namespace

int main() {
  const kiln::Status status = run();
  if (status.ok()) return 0;
  kiln::print("embed_app: failed: ");
  kiln::print_error(status.error());
  return 1;
}
