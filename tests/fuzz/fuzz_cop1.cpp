// libFuzzer target: the driver's checks of a COP1 payload alone, on the stand-in NPU of
// host_npu.h: Driver::check (cop1.cpp), whose stream must lie inside the payload, 16-byte
// aligned; then Driver::check_bounds (bounds.cpp) of that stream against kRegions.
#include "fuzz_input.h"
#include "host_npu.h"

namespace {

// Buffers large enough for every stream kiln's seeds hold (so the walk goes through
// them whole): the weights (read-only), the scratch and the fast scratch.
constexpr kiln::ethosu::RegionLimit kRegions[] = {{1u << 20, false}, {1u << 20, true}, {1u << 20, true}};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Buffer payload(data, size);
  auto stream = kiln::fuzz::npu().check(payload.data(), payload.size());
  if (stream.ok()) {
    const kiln::ethosu::CommandStream& s = stream.value();
    if (!kiln::fuzz::inside(s.words, s.size_bytes, payload.data(), payload.size())) {
      kiln::fuzz::broken("the command stream lies outside the COP1 payload");
    }
    if (reinterpret_cast<uintptr_t>(s.words) % 16 != 0) kiln::fuzz::broken("the command stream is misaligned");
    (void)kiln::fuzz::npu().check_bounds(s, kRegions, 3);
  }
  return 0;
}
