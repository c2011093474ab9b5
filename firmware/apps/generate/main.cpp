// kiln's generation app: runs the language model baked into this image (model.h): its methods
// ("prefill" and "decode", or decode alone) over one zeroed state arena (the KV cache), the
// prompt from a host file, then one token per step; prints a line per token with its cycles (and
// the NPU's PMU line when NPU streams ran), then the generated text; with --output-dir writes
// every step's logits. Exit statuses are the executor runner's (runner.h). generate.h states the
// program and the options; docs/running.md the lines.
#include <cstdint>
#include <cstring>

#include "generate.h"
#include "kiln/cpu.h"
#include "kiln/platform.h"
#include "kiln_board.h"
#include "model.h"
#include "npu.h"
#include "runner.h"

using namespace kiln;

namespace {

// One generation step, as it goes in and out of the methods.
struct Run {
  bool counting;              // the CPU has a cycle counter
  const HostFile& logits;     // open: every step's logits go there
  int32_t* tokens;            // the generated tokens, kTokenRoom of them (generate::tokens)
  uint32_t begin = 0;         // the step's cycle count at its start
};

// Starts a step: the NPU's counters cleared, the CPU's cycles noted.
void start(Run& run) {
  runner::reset_npu_counts();
  run.begin = cpu::cycle_count();
}

// Runs `step`'s method once; kExitOk or kExitInference.
int execute(generate::Step& step) {
  runtime::Status done = step.method.execute();
  return done.ok() ? runner::kExitOk : runner::fail_inference(done.error());
}

// Ends step `k` (the method's last run made token k, which takes `position`): reads the token,
// prints its lines, writes its logits. kExitOk, or kExitUsage when the logits cannot be written.
int finish(const generate::Step& step, const char* name, uint32_t k, uint32_t position, Run& run) {
  const uint32_t cycles = cpu::cycle_count() - run.begin;
  int64_t token = 0;
  generate::load(*step.method.output(step.token), 0, token);  // an integer tensor (checked at bind)
  generate::print_token(k, token, position, name);
  if (token < INT32_MIN || token > INT32_MAX) {  // kept as int32_t: a token indexes the vocabulary
    print("runner: token %u is past 32 bits\n", unsigned(k));
    return runner::kExitInference;
  }
  run.tokens[k] = static_cast<int32_t>(token);
  runner::print_run(run.counting, cycles);
  const runtime::Tensor& logits = *step.method.output(step.logits);
  if (run.logits.is_open() && !run.logits.write(logits.data, logits.nbytes)) {
    print("runner: writing the logits failed\n");
    return runner::kExitUsage;
  }
  return runner::kExitOk;
}

// Decode of `token` at `position`.
int decode(generate::Model& model, int64_t token, uint32_t position) {
  generate::store(*model.decode.method.input(0), 0, token);
  generate::store(*model.decode.method.input(1), 0, position);
  return execute(model.decode);
}

}  // namespace

int main() {
  const runner::ModelMemory& m = runner::kModel;
  print("kiln generate: %s (%s) on %s\n", m.name, m.memory_mode, KILN_BOARD_NAME);
  generate::Options options;
  if (!generate::parse_options(options)) return runner::kExitUsage;

  auto program = runtime::Program::load(kiln_model_pte, kiln_model_pte_end - kiln_model_pte);
  if (!program.ok()) return runner::fail("loading the .pte", program.error(), runner::kExitLoad);
  if (int status = runner::start_npu(m.delegates > 0, options.common.npu_timeout_ms)) return status;
  // The state arena starts at zero: the .pte holds no initial state (kiln/runtime/program.h).
  if (m.planned.size >= runtime::kStateMemoryId) {
    const runtime::Span<uint8_t>& arena = m.planned[runtime::kStateMemoryId - 1];
    std::memset(arena.data, 0, arena.size);
  }
  generate::Model model;
  if (int status = generate::bind(program.value(), runner::npu_backends(), model)) return status;
  generate::Prompt prompt;
  if (int status = generate::set_prompt(options, model, prompt)) return status;
  HostFile logits;  // on the stack: its destructor closes the file
  char path[runner::kPathCapacity];
  if (options.common.output_dir != nullptr && (!runner::path_in(options.common.output_dir, "logits.bin", path) ||
                                               !logits.open(path, HostFile::Mode::kWriteBinary))) {
    print("runner: cannot write the logits to %s\n", options.common.output_dir);
    return runner::kExitUsage;
  }

  // Filled from token 0 on: the command line's and the prompt's storage, both done with by then.
  int32_t* const tokens = generate::tokens();
  Run run{cpu::start_cycle_counter(), logits, tokens};
  const uint32_t length = prompt.length;
  start(run);  // token 0: prefill, or decode through the whole prompt
  if (model.has_prefill) {
    if (int status = execute(model.prefill)) return status;
  } else {
    for (uint32_t p = 0; p < length; ++p) {
      if (int status = decode(model, prompt.bytes[p], p)) return status;
    }
  }
  const generate::Step& first = model.has_prefill ? model.prefill : model.decode;
  if (int status = finish(first, model.has_prefill ? "prefill" : "decode", 0, length, run)) return status;
  for (uint32_t k = 1; k < options.tokens; ++k) {
    // The previous token goes in at position length + k - 1 (inside the cache: set_prompt).
    start(run);
    if (int status = decode(model, tokens[k - 1], length + k - 1)) return status;
    if (int status = finish(model.decode, "decode", k, length + k, run)) return status;
  }
  generate::print_text(tokens, options.tokens);
  return runner::kExitOk;
}
