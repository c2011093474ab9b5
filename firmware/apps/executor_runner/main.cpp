// kiln's executor runner: runs the .pte baked into this image (model.h) with
// inputs from host files or built-in defaults; writes and summarises the outputs,
// prints CPU and NPU cycles per inference and, when NPU streams ran, the NPU's PMU line
// (print_pmu); exits 0 when every inference succeeded
// (runner.h lists the other statuses).
#include "kiln/cpu.h"
#include "kiln/delegates/ethosu_backend.h"
#include "kiln/platform.h"
#include "kiln_board.h"
#include "model.h"
#include "runner.h"

using namespace kiln;

namespace {

// `value` in decimal (the console's %u takes 32 bits).
void print_u64(uint64_t value) {
  constexpr uint64_t kBillion = 1000000000u;
  if (value < (uint64_t{1} << 32)) {
    print("%u", unsigned(value));
  } else {
    print_u64(value / kBillion);
    print("%09u", unsigned(value % kBillion));
  }
}

// The NPU PMU line of one inference, the driver's counts summed over its streams:
//   NPU PMU: total T active A idle I cycles, axi0_rd R axi0_wr W axi1_rd R axi1_wr W beats
// An event the NPU family has no counter for reads n/a (the U55/U65's AXI1 write beats);
// their active is total - idle (ethosu::PmuCounts). docs/running.md states the format.
void print_pmu(const ethosu::PmuCounts& pmu) {
  using P = ethosu::PmuCounts;
  static const char* const kNames[P::kEvents] = {" active ",  " idle ",    " cycles, axi0_rd ",
                                                 " axi0_wr ", " axi1_rd ", " axi1_wr "};
  print("NPU PMU: total ");
  print_u64(pmu.total);
  for (int e = 0; e < P::kEvents; ++e) {
    print("%s", kNames[e]);
    const bool derived = e == P::kActive;  // active may be derived; beats are never
    if (!derived && !(pmu.counted & (1u << e))) {
      print("n/a");
    } else {
      print_u64(pmu.events[e]);
    }
  }
  print(" beats\n");
}

}  // namespace

int main() {
  const runner::ModelMemory& m = runner::kModel;
  print("kiln executor runner: %s (%s) on %s\n", m.name, m.memory_mode, KILN_BOARD_NAME);
  runner::Options options;
  if (!runner::parse_options(options)) return runner::kExitUsage;

  auto program = runtime::Program::load(kiln_model_pte, kiln_model_pte_end - kiln_model_pte);
  if (!program.ok()) return runner::fail("loading the .pte", program.error(), runner::kExitLoad);
  ethosu::Driver driver;
  if (program.value().delegate_count() > 0) {
    auto npu = ethosu::Driver::create(KILN_NPU_BASE);
    if (!npu.ok()) return runner::fail("finding the NPU", npu.error(), runner::kExitNpu);
    driver = npu.value();
  }
  static delegates::ethosu::Context npu;
  npu.driver = &driver;
  npu.scratch = m.scratch;
  npu.fast_scratch = m.fast_scratch;
  npu.pool = m.delegate_pool;
  npu.options.timeout_ms = options.npu_timeout_ms;
  static const runtime::Backend ethosu = delegates::ethosu::backend(npu);
  static const runtime::Backend* const backends[] = {&ethosu};
  const runtime::MethodMemory memory{m.planned, m.values, m.kernels, m.delegates};
  auto method =
      runtime::Method::create(program.value(), memory, runtime::kKernelTable, runtime::BackendTable{backends, 1});
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
    delegates::ethosu::reset_counters(npu);
    const uint32_t begin = cpu::cycle_count();
    runtime::Status run = method.value().execute();
    const uint32_t cycles = cpu::cycle_count() - begin;
    if (!run.ok()) return runner::fail_inference(run.error(), driver);
    print("inference %u: NPU cycles %u (%u stream(s)), CPU cycles ", unsigned(s), unsigned(npu.npu_cycles),
          unsigned(npu.runs));
    counting ? print("%u\n", unsigned(cycles)) : print("not counted (no DWT on this platform)\n");
    if (npu.runs > 0) print_pmu(npu.pmu);
    runner::summarise_outputs(method.value());
    if (!runner::write_sample(method.value(), outputs)) return runner::kExitUsage;
  }
  return runner::kExitOk;
}
