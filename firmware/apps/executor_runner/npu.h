// The NPU the apps run delegates on, as the build chose it (CMake compiles one of):
//   npu_ethosu.cpp  kiln's Ethos-U driver and the EthosUBackend over the image's NPU memory
//                   (kNpuMemory, npu_ethosu.h)
//   no_npu.cpp      none: a target that is a CPU alone. No backend, so binding a program that
//                   calls a delegate fails with kMethodMissingBackend (kiln.firmware.runner_build
//                   refuses to build such an image in the first place).
// Its state is static storage inside that file (the backend points into it).
#pragma once

#include <cstdint>

#include "kiln/runtime/backend.h"
#include "kiln/runtime/error.h"

namespace kiln::runner {

// Finds the NPU when `needed` (a program with delegates) and sets up its backend with the
// driver's timeout per command stream (`timeout_ms`; 0: the driver's default); kExitOk, or
// kExitNpu after printing the failure. Call once, before npu_backends().
int start_npu(bool needed, uint32_t timeout_ms);

// The backends Method::create binds delegates to: the NPU's, or none.
runtime::BackendTable npu_backends();

// Zeroes the NPU's cycle and PMU counts; call before each inference.
void reset_npu_counts();

// The rest of a run's line after its own start ("inference K: "): "NPU cycles N (S stream(s)),
// CPU cycles C" (C: "not counted (no DWT on this platform)" unless `counting`), then, when NPU
// streams ran, the PMU line (docs/running.md states both). Without an NPU, N and S are 0.
void print_run(bool counting, uint32_t cpu_cycles);

// fail() for an inference; an error of the driver's running a stream (kNpuBusy, kNpuFault,
// kNpuIncomplete, kNpuTimeout, kNpuResetFailed) adds the line "NPU STATUS after the failure:
// 0x<STATUS>" (0 once the driver's reset stopped the NPU).
int fail_inference(const runtime::Error& error);

}  // namespace kiln::runner
