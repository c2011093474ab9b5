// libFuzzer target: Driver::check of a COP1 payload alone (the firmware's cop1.cpp and
// command-stream checks; the stand-in NPU of host_npu.h). A stream it accepts must lie
// inside the payload, 16-byte aligned.
#include "fuzz_input.h"
#include "host_npu.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Buffer payload(data, size);
  auto stream = kiln::fuzz::npu().check(payload.data(), payload.size());
  if (stream.ok()) {
    const kiln::ethosu::CommandStream& s = stream.value();
    if (!kiln::fuzz::inside(s.words, s.size_bytes, payload.data(), payload.size())) {
      kiln::fuzz::broken("the command stream lies outside the COP1 payload");
    }
    if (reinterpret_cast<uintptr_t>(s.words) % 16 != 0) kiln::fuzz::broken("the command stream is misaligned");
  }
  return 0;
}
