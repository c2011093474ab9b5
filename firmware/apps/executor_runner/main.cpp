// kiln's executor runner: runs the first method of the .pte baked into this image (model.h)
// with inputs from host files or built-in defaults; writes and summarises the outputs,
// prints CPU and NPU cycles per inference and, when NPU streams ran, the NPU's PMU line
// (runner::print_run); exits 0 when every inference succeeded
// (runner.h lists the other statuses). A bundle (.bpte) baked in instead: its cases run and
// are checked (runner::run_bundle).
#include "bundle.h"
#include "kiln/cpu.h"
#include "kiln/delegates/ethosu_backend.h"
#include "kiln/platform.h"
#include "kiln_board.h"
#include "model.h"
#include "runner.h"

using namespace kiln;

int main() {
  const runner::ModelMemory& m = runner::kModel;
  print("kiln executor runner: %s (%s) on %s\n", m.name, m.memory_mode, KILN_BOARD_NAME);
  runner::Options options;
  if (!runner::parse_options(options)) return runner::kExitUsage;
  const size_t baked = kiln_model_pte_end - kiln_model_pte;
  if (runner::Bundle::is_bundle(kiln_model_pte, baked)) return runner::run_bundle(kiln_model_pte, baked, options);

  auto program = runtime::Program::load(kiln_model_pte, baked);
  if (!program.ok()) return runner::fail("loading the .pte", program.error(), runner::kExitLoad);
  static runner::Npu npu;
  if (int status = runner::start_npu(program.value().delegate_count() > 0, options.npu_timeout_ms, npu)) {
    return status;
  }
  // The program's first method (the handle Program::load returns reads it).
  auto method = runtime::Method::create(program.value(), m.methods[0], runtime::kKernelTable, npu.backends());
  if (!method.ok()) return runner::fail("binding the program", method.error(), runner::kExitBind);
  // The watchdog of the CPU path: each execute() may charge at most this many elements
  // (Method::set_work_budget: per instruction, 1 + the numel of its tensor arguments), a
  // margin over what one pass of the program charges; beyond it execute() fails with
  // kMethodWorkBudget (exit kExitInference) instead of running on.
  method.value().set_work_budget(runtime::runner_work_budget(method.value().work_per_run()));

  // On the stack, not static: their destructors close the host files when main returns
  // (static ones would register with atexit and link newlib's exit handlers).
  runner::Inputs inputs;
  runner::Outputs outputs;
  if (!runner::open_inputs(options, method.value(), inputs) ||
      !runner::open_outputs(options, method.value(), outputs)) {
    return runner::kExitUsage;
  }
  const bool counting = cpu::start_cycle_counter();
  for (uint32_t s = 0; s < inputs.samples; ++s) {
    if (!runner::read_sample(method.value(), inputs)) return runner::kExitUsage;
    delegates::ethosu::reset_counters(npu.context);
    const uint32_t begin = cpu::cycle_count();
    runtime::Status run = method.value().execute();
    const uint32_t cycles = cpu::cycle_count() - begin;
    if (!run.ok()) return runner::fail_inference(run.error(), npu.driver);
    print("inference %u: ", unsigned(s));
    runner::print_run(npu.context, counting, cycles);
    runner::summarise_outputs(method.value());
    if (!runner::write_sample(method.value(), outputs)) return runner::kExitUsage;
  }
  return runner::kExitOk;
}
