// The models baked into the runner and their statically sized memory. Defined by the
// files kiln.firmware.runner_build generates for one .pte or several (model_pte.S,
// model_memory.cpp): every size below comes from those .pte files, every buffer sits in the
// board region the memory mode puts it in (see the build's memory report).
#pragma once

#include <cstdint>

#include "kiln/runtime/method.h"
#include "kiln/runtime/span.h"

// The first model's .pte bytes, 128-byte aligned (ExecuTorch's segment alignment), read-only.
extern "C" const uint8_t kiln_model_pte[];
extern "C" const uint8_t kiln_model_pte_end[];

namespace kiln::runner {

struct ModelMemory {
  const char* name;         // the model (its .pte's file name), for the UART and --model=NAME
  const char* memory_mode;  // e.g. "Shared_Sram"
  // Memory ids 1..n, 32-byte aligned, each the largest any method of the program plans: one
  // set for every method (the apps run one method at a time). Memory id 2, when the program
  // has one, is its state arena (kiln/runtime/program.h): zero at start-up (.bss).
  runtime::Span<runtime::Span<uint8_t>> planned;
  // Per method (execution plan, in the program's order): the memory its Method binds, planned
  // being the buffers above.
  runtime::Span<const runtime::MethodMemory> methods;
  // Per program input: bytes baked in at build time, or empty (the input is zeroed).
  runtime::Span<const runtime::Span<const uint8_t>> default_inputs;
  const uint8_t* pte;      // its .pte bytes up to pte_end, 128-byte aligned, read-only
  const uint8_t* pte_end;
  runtime::Method* method;  // storage for the executor runner's binding of its first method
  // The image's, the same in every model's entry: every model's delegates (the NPU's memory
  // for them is kNpuMemory, npu_ethosu.h; 0 in an image without an NPU).
  uint32_t delegates;
};

// Every model of the image, in the order the build was given them (at least one).
extern const runtime::Span<const ModelMemory> kModels;
// The first (the apps that run one model run this one).
extern const ModelMemory& kModel;

}  // namespace kiln::runner
