// The executor runner's profiling hooks (main.cpp calls them). CMake chooses their implementation
// by the app it builds: no_profiling.cpp for executor_runner (nothing is recorded),
// etdump_profiling.cpp for executor_runner_etdump (an ETDump of every inference, printed on the
// UART at the end: docs/profiling.md).
#pragma once

#include "runner.h"

namespace kiln::runner::profiling {

// The backends Method::create binds: `npu` (npu_backends(), after start_npu) as it is, or its
// first wrapped to time each delegate call (the wrapper keeps a pointer to that backend).
runtime::BackendTable backends(runtime::BackendTable npu);

// Starts the record of one inference; call before each execute().
void begin_inference();

// At the app's end: the record goes out (etdump_profiling.cpp prints it); returns `status`.
int finish(int status);

}  // namespace kiln::runner::profiling
