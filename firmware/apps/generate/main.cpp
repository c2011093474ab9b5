// kiln's generation app: runs the language model baked into this image (model.h): methods
// "prefill" and "decode" over one zeroed state arena (the KV cache), the prompt from a host
// file, then one token per step; prints a line per token with its cycles (and the NPU's PMU
// line when NPU streams ran), then the generated text; with --output-dir writes every step's
// logits. Exit statuses are the executor runner's (runner.h). generate.h states the program
// and the options; docs/running.md the lines.
#include <cstring>

#include "generate.h"
#include "kiln/cpu.h"
#include "kiln/platform.h"
#include "kiln_board.h"
#include "model.h"
#include "runner.h"

using namespace kiln;

namespace {

// Runs one step of `method` and reads its token into tokens[k]; kExitOk or kExitInference.
int step(runtime::Method& method, const char* name, uint32_t k, uint32_t position, runner::Npu& npu, bool counting,
         const HostFile& logits, int64_t* tokens) {
  delegates::ethosu::reset_counters(npu.context);
  const uint32_t begin = cpu::cycle_count();
  runtime::Status run = method.execute();
  const uint32_t cycles = cpu::cycle_count() - begin;
  if (!run.ok()) return runner::fail_inference(run.error(), npu.driver);
  generate::load(*method.output(0), 0, tokens[k]);  // an integer tensor (checked at bind)
  generate::print_token(k, tokens[k], position, name);
  runner::print_run(npu.context, counting, cycles);
  const runtime::Tensor* out = method.output(1);
  if (logits.is_open() && out != nullptr && !logits.write(out->data, out->nbytes)) {
    print("runner: writing the logits failed\n");
    return runner::kExitUsage;
  }
  return runner::kExitOk;
}

}  // namespace

int main() {
  const runner::ModelMemory& m = runner::kModel;
  print("kiln generate: %s (%s) on %s\n", m.name, m.memory_mode, KILN_BOARD_NAME);
  generate::Options options;
  if (!generate::parse_options(options)) return runner::kExitUsage;

  auto program = runtime::Program::load(kiln_model_pte, kiln_model_pte_end - kiln_model_pte);
  if (!program.ok()) return runner::fail("loading the .pte", program.error(), runner::kExitLoad);
  static runner::Npu npu;
  if (int status = runner::start_npu(m.delegate_pool.size > 0, options.common.npu_timeout_ms, npu)) return status;
  // The state arena starts at zero: the .pte holds no initial state (kiln/runtime/program.h).
  if (m.planned.size >= runtime::kStateMemoryId) {
    const runtime::Span<uint8_t>& arena = m.planned[runtime::kStateMemoryId - 1];
    std::memset(arena.data, 0, arena.size);
  }
  generate::Model model;
  if (int status = generate::bind(program.value(), npu.backends(), model)) return status;
  uint32_t length = 0;
  if (int status = generate::set_prompt(options, model, length)) return status;
  HostFile logits;  // on the stack: its destructor closes the file
  char path[runner::kPathCapacity];
  if (options.common.output_dir != nullptr && (!runner::path_in(options.common.output_dir, "logits.bin", path) ||
                                               !logits.open(path, HostFile::Mode::kWriteBinary))) {
    print("runner: cannot write the logits to %s\n", options.common.output_dir);
    return runner::kExitUsage;
  }

  static int64_t tokens[generate::kMaxTokens];
  const bool counting = cpu::start_cycle_counter();
  if (int status = step(model.prefill, "prefill", 0, length, npu, counting, logits, tokens)) return status;
  for (uint32_t k = 1; k < options.tokens; ++k) {
    // The previous token goes in at position length + k - 1 (inside the cache: set_prompt).
    const uint32_t position = length + k - 1;
    generate::store(*model.decode.input(0), 0, tokens[k - 1]);
    generate::store(*model.decode.input(1), 0, position);
    if (int status = step(model.decode, "decode", k, position + 1, npu, counting, logits, tokens)) return status;
  }
  generate::print_text(tokens, options.tokens);
  return runner::kExitOk;
}
