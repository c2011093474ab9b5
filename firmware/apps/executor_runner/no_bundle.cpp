// The executor runner without its bundle mode: the build links this instead of bundle.cpp and
// bundle_check.cpp when the image bakes a .pte (kiln.firmware.runner_build passes
// KILN_RUNNER_BUNDLE), so a runner for a program carries none of the bundle reader's code.
#include "bundle.h"
#include "runner.h"

namespace kiln::runner {

bool Bundle::is_bundle(const uint8_t*, size_t) { return false; }

int run_bundle(const uint8_t*, size_t, const Options&) { return kExitLoad; }

}  // namespace kiln::runner
