// The Ethos-U behind npu.h (npu_ethosu.cpp), for what needs more of it than npu.h gives: the
// generated model_memory.cpp (kNpuMemory) and the ETDump recorder (the backend and its counts).
#pragma once

#include "kiln/delegates/ethosu_backend.h"
#include "kiln/ethosu/driver.h"
#include "kiln/runtime/span.h"

namespace kiln::runner {

// The image's NPU memory, shared by its models (they run one at a time, and a delegate's
// scratch holds nothing from one execute() to the next). Defined by the generated
// model_memory.cpp; every size comes from the .pte files.
struct NpuMemory {
  runtime::Span<delegates::ethosu::DelegateState> delegate_pool;  // every model's delegates
  runtime::Span<uint8_t> scratch;       // Ethos-U region 1, 32-byte aligned
  runtime::Span<uint8_t> fast_scratch;  // Ethos-U region 2 (Dedicated_Sram), else empty
};
extern const NpuMemory kNpuMemory;

// The driver and the Ethos-U backend's context over kNpuMemory.
struct Npu {
  kiln::ethosu::Driver driver;
  delegates::ethosu::Context context;
  runtime::Backend backend;
  const runtime::Backend* list[1];
};
// The one Npu (static storage), set up by start_npu.
Npu& npu();

}  // namespace kiln::runner
