// libFuzzer target: a BundledProgram (.bpte) as the executor runner's bundle mode reads it
// (firmware/apps/executor_runner/bundle.cpp): Bundle::load, then every accessor over every
// suite, case and value, each view's bytes read whole; the program inside must lie inside the
// bundle, and Program::load verifies it.
#include "bundle.h"
#include "fuzz_input.h"
#include "kiln/runtime/program.h"

namespace {

using kiln::fuzz::broken;
using kiln::fuzz::Buffer;
using kiln::fuzz::inside;

// Reads every byte of a view the bundle promised lies inside it (AddressSanitizer reports a
// read outside the input's buffer, which is exactly its size).
unsigned touch(const void* data, size_t size, const Buffer& input, const char* what) {
  if (size == 0) return 0;
  if (!inside(data, size, input.data(), input.size())) broken(what);
  unsigned sum = 0;
  for (size_t i = 0; i < size; ++i) sum += static_cast<const uint8_t*>(data)[i];
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Buffer input(data, size);
  auto loaded = kiln::runner::Bundle::load(input.data(), input.size());
  if (!loaded.ok()) return 0;
  const kiln::runner::Bundle& bundle = loaded.value();
  const auto program = bundle.program();
  if (program.size == 0) broken("a loaded bundle has no program");
  unsigned sum = touch(program.data, program.size, input, "the program lies outside the bundle");
  for (uint32_t s = 0; s < bundle.suite_count(); ++s) {
    const kiln::runtime::StringView name = bundle.method_name(s);
    sum += touch(name.data, name.size, input, "a method name lies outside the bundle");
    for (uint32_t c = 0; c < bundle.case_count(s); ++c) {
      for (int side = 0; side < 2; ++side) {  // the inputs, then the expected outputs
        const bool expected = side == 1;
        for (uint32_t i = 0; i < bundle.value_count(s, c, expected); ++i) {
          const kiln::runner::BundleValue v = bundle.value(s, c, expected, i);
          sum += touch(v.sizes.data, v.sizes.size * sizeof(int32_t), input, "a tensor's sizes lie outside");
          sum += touch(v.data.data, v.data.size, input, "a tensor's data lies outside the bundle");
        }
      }
    }
  }
  (void)kiln::runtime::Program::load(program.data, program.size);
  return sum == 0xFFFFFFFFu;  // keeps the reads
}
