// kiln's executor runner: runs the first method of each .pte baked into this image (model.h),
// in the sequence the command line gives (runner.h), with inputs from host files or built-in
// defaults; writes and summarises the outputs, prints CPU and NPU cycles per inference and,
// when NPU streams ran, the NPU's PMU line (runner::print_run); exits 0 when every inference
// succeeded (runner.h lists the other statuses). A bundle (.bpte) baked in instead of a one-model
// image's .pte: its cases run and are checked (runner::run_bundle).
#include "bundle.h"
#include "kiln/cpu.h"
#include "kiln/platform.h"
#include "kiln_board.h"
#include "model.h"
#include "npu.h"
#include "profiling.h"
#include "runner.h"

using namespace kiln;

namespace {

// Runs `step`'s samples on its model's bound method; kExitOk or the failure's status.
int run_step(const runner::Options& options, const runner::Step& step, bool counting) {
  const runner::ModelMemory& model = runner::kModels[step.model];
  runtime::Method& method = *model.method;
  const bool several = runner::kModels.size > 1;
  if (several) print("model %s\n", model.name);
  // On the stack, not static: their destructors close the host files when the step ends
  // (static ones would register with atexit and link newlib's exit handlers).
  runner::Inputs inputs;
  runner::Outputs outputs;
  if (!runner::open_inputs(options, step, method, inputs) ||
      !runner::open_outputs(options, several ? model.name : nullptr, method, outputs)) {
    return runner::kExitUsage;
  }
  for (uint32_t s = 0; s < inputs.samples; ++s) {
    if (!runner::read_sample(model, method, inputs)) return runner::kExitUsage;
    runner::reset_npu_counts();
    runner::profiling::begin_inference();
    const uint32_t begin = cpu::cycle_count();
    runtime::Status run = method.execute();
    const uint32_t cycles = cpu::cycle_count() - begin;
    if (!run.ok()) return runner::fail_inference(run.error());
    print("inference %u: ", unsigned(s));
    runner::print_run(counting, cycles);
    runner::summarise_outputs(method);
    if (!runner::write_sample(method, outputs)) return runner::kExitUsage;
  }
  return runner::kExitOk;
}

}  // namespace

int main() {
  print("kiln executor runner: ");
  for (size_t k = 0; k < runner::kModels.size; ++k) print(k ? "+%s" : "%s", runner::kModels[k].name);
  print(" (%s) on %s\n", runner::kModel.memory_mode, KILN_BOARD_NAME);
  runner::Options options;
  if (!runner::parse_options(options)) return runner::kExitUsage;
  const runner::ModelMemory& first = runner::kModel;
  const size_t baked = static_cast<size_t>(first.pte_end - first.pte);
  if (runner::kModels.size == 1 && runner::Bundle::is_bundle(first.pte, baked)) {
    return runner::run_bundle(first.pte, baked, options);
  }

  if (int status = runner::start_npu(runner::kModel.delegates > 0, options.npu_timeout_ms)) return status;
  const runtime::BackendTable backends = runner::profiling::backends(runner::npu_backends());
  // Each model bound once, before any runs: the pool hands out a state per delegate for good.
  for (const runner::ModelMemory& m : runner::kModels) {
    auto program = runtime::Program::load(m.pte, static_cast<size_t>(m.pte_end - m.pte));
    if (!program.ok()) return runner::fail("loading the .pte", program.error(), runner::kExitLoad);
    // The program's first method (the handle Program::load returns reads it).
    auto method = runtime::Method::create(program.value(), m.methods[0], runtime::kKernelTable, backends);
    if (!method.ok()) return runner::fail("binding the program", method.error(), runner::kExitBind);
    *m.method = method.value();
    // The watchdog of the CPU path: each execute() may charge at most this many elements
    // (Method::set_work_budget: per instruction, 1 + the numel of its tensor arguments), a
    // margin over what one pass of the program charges; beyond it execute() fails with
    // kMethodWorkBudget (exit kExitInference) instead of running on.
    m.method->set_work_budget(runtime::runner_work_budget(m.method->work_per_run()));
  }
  const bool counting = cpu::start_cycle_counter();
  for (int s = 0; s < options.step_count; ++s) {
    if (int status = run_step(options, options.steps[s], counting)) return status;
  }
  return runner::profiling::finish(runner::kExitOk);
}
