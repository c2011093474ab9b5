// npu.h for a target that is a CPU alone: no driver, no backend.
#include "kiln/platform.h"
#include "npu.h"
#include "runner.h"

namespace kiln::runner {

int start_npu(bool, uint32_t) { return kExitOk; }

runtime::BackendTable npu_backends() { return runtime::BackendTable{nullptr, 0}; }

void reset_npu_counts() {}

void print_run(bool counting, uint32_t cpu_cycles) {
  print("NPU cycles 0 (0 stream(s)), CPU cycles ");
  counting ? print("%u\n", unsigned(cpu_cycles)) : print("not counted (no DWT on this platform)\n");
}

int fail_inference(const runtime::Error& error) { return fail("inference", error, kExitInference); }

}  // namespace kiln::runner
