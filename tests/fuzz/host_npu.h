// The fuzzers' stand-in NPU: kiln::ethosu::Driver on the host, over a register file in
// memory that reads as the NPU the build names (KILN_FUZZ_NPU_ID, KILN_FUZZ_NPU_CONFIG:
// kiln.simulator.npu.config's values for one target). Driver::check is the firmware's
// own (cop1.cpp and the other driver sources); Driver::run completes every job at once
// (host_npu.cpp says what it checks).
#pragma once

#include "kiln/ethosu/driver.h"

namespace kiln::fuzz {

// The one stand-in driver, made on first use; lives for the process.
const ethosu::Driver& npu();

}  // namespace kiln::fuzz
