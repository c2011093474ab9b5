// libFuzzer target: the Ethos-U delegate's parse_payload (a vela_bin_stream payload),
// then Driver::check of the COP1 payload it found and Driver::check_bounds of its stream
// against the payload's own buffers, as the delegate's init checks them. What parse_payload promises is
// checked on every payload it accepts: the blocks lie inside the payload, every I/O
// tensor inside the scratch.
#include "fuzz_input.h"
#include "host_npu.h"
#include "kiln/delegates/ethosu_payload.h"

namespace {

using kiln::fuzz::broken;
using kiln::fuzz::inside;

void check_promises(const kiln::delegates::ethosu::Payload& p, const kiln::fuzz::Buffer& bytes) {
  if (!inside(p.cmd, p.cmd_size, bytes.data(), bytes.size())) broken("cmd_data outside the payload");
  if (p.weights_size != 0 && !inside(p.weights, p.weights_size, bytes.data(), bytes.size())) {
    broken("weight_data outside the payload");
  }
  for (uint32_t i = 0; i < p.input_count + p.output_count; ++i) {
    const auto io = i < p.input_count ? p.input(i) : p.output(i - p.input_count);
    if (uint64_t{io.offset} + io.bytes > p.scratch_size) broken("an I/O tensor outside the scratch");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Buffer bytes(data, size);
  auto parsed = kiln::delegates::ethosu::parse_payload(bytes.data(), bytes.size());
  if (!parsed.ok()) return 0;
  const kiln::delegates::ethosu::Payload& p = parsed.value();
  check_promises(p, bytes);
  auto stream = kiln::fuzz::npu().check(p.cmd, p.cmd_size);
  if (!stream.ok()) return 0;
  if (!inside(stream.value().words, stream.value().size_bytes, p.cmd, p.cmd_size)) {
    broken("the command stream lies outside cmd_data");
  }
  const kiln::ethosu::RegionLimit regions[] = {{p.weights_size, false}, {p.scratch_size, true}};
  (void)kiln::fuzz::npu().check_bounds(stream.value(), regions, 2);
  return 0;
}
