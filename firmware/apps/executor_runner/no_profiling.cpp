// The executor runner's profiling hooks (profiling.h) when it records nothing.
#include "profiling.h"

namespace kiln::runner::profiling {

runtime::BackendTable backends(runtime::BackendTable npu) { return npu; }

void begin_inference() {}

int finish(int status) { return status; }

}  // namespace kiln::runner::profiling
