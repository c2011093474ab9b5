// npu.h over kiln's Ethos-U driver and the EthosUBackend (npu_ethosu.h).
#include "npu_ethosu.h"

#include "kiln/platform.h"
#include "kiln_board.h"
#include "npu.h"
#include "runner.h"

namespace kiln::runner {

Npu& npu() {
  static Npu the_npu;  // the delegate pool holds every model's delegates
  return the_npu;
}

int start_npu(bool needed, uint32_t timeout_ms) {
  Npu& n = npu();
  if (needed) {
    auto found = ethosu::Driver::create(KILN_NPU_BASE);
    if (!found.ok()) return fail("finding the NPU", found.error(), kExitNpu);
    n.driver = found.value();
  }
  n.context.driver = &n.driver;
  n.context.scratch = kNpuMemory.scratch;
  n.context.fast_scratch = kNpuMemory.fast_scratch;
  n.context.pool = kNpuMemory.delegate_pool;
  if (timeout_ms != 0) n.context.options.timeout_ms = timeout_ms;
  n.backend = delegates::ethosu::backend(n.context);
  n.list[0] = &n.backend;
  return kExitOk;
}

runtime::BackendTable npu_backends() { return runtime::BackendTable{npu().list, 1}; }

void reset_npu_counts() { delegates::ethosu::reset_counters(npu().context); }

namespace {

// The NPU PMU line of one run, the driver's counts summed over its streams:
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

void print_run(bool counting, uint32_t cpu_cycles) {
  const delegates::ethosu::Context& context = npu().context;
  print("NPU cycles %u (%u stream(s)), CPU cycles ", unsigned(context.npu_cycles), unsigned(context.runs));
  counting ? print("%u\n", unsigned(cpu_cycles)) : print("not counted (no DWT on this platform)\n");
  if (context.runs > 0) print_pmu(context.pmu);
}

int fail_inference(const runtime::Error& error) {
  using runtime::ErrorCode;
  fail("inference", error, kExitInference);
  switch (error.code) {
    case ErrorCode::kNpuBusy:
    case ErrorCode::kNpuFault:
    case ErrorCode::kNpuIncomplete:
    case ErrorCode::kNpuTimeout:
    case ErrorCode::kNpuResetFailed:
      print("NPU STATUS after the failure: 0x%08x\n", unsigned(npu().driver.status()));
      break;
    default: break;
  }
  return kExitInference;
}

}  // namespace kiln::runner
