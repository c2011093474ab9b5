// Host driver of the Ethos-U driver's command-stream bounds check (tests only).
//   npu_bounds_host PAYLOAD [FAST_SCRATCH_BYTES]
//   npu_bounds_host --match NPU_CONFIG NPU_ID PAYLOAD
// PAYLOAD: a vela_bin_stream delegate payload. Checks it as the delegate's init does:
// parse_payload, the COP1 command stream (parse_cop1), then check_stream_bounds with
// region 0 = the payload's weights (read-only), 1 = its scratch_size bytes of scratch,
// 2 = FAST_SCRATCH_BYTES of fast scratch (when given), for the NPU configuration the
// stream was compiled for. Prints "ok" and exits 0, or "error 0x<code> " and the error
// (kiln::runtime::print_error) and exits 1.
// --match: parse_payload, parse_cop1, then match_target against an NPU whose CONFIG and ID
// registers read NPU_CONFIG and NPU_ID (numbers, 0x for hex), as Driver::check does.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kiln/delegates/ethosu_payload.h"
#include "kiln/ethosu/driver.h"

using namespace kiln;

namespace {

int fail(const runtime::Error& error) {
  std::printf("error 0x%x ", static_cast<unsigned>(error.code));
  runtime::print_error(error);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool match = argc == 5 && std::strcmp(argv[1], "--match") == 0;
  if (!match && (argc < 2 || argc > 3)) {
    std::fprintf(stderr, "usage: npu_bounds_host PAYLOAD [FAST_SCRATCH_BYTES] | --match CONFIG ID PAYLOAD\n");
    return 2;
  }
  const char* path = match ? argv[4] : argv[1];
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", path);
    return 2;
  }
  std::vector<uint8_t> bytes;
  uint8_t chunk[65536];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  std::fclose(f);
  // Exactly the payload's bytes, 16-byte aligned, so AddressSanitizer sees any read past it.
  uint8_t* data = nullptr;
  if (posix_memalign(reinterpret_cast<void**>(&data), 16, bytes.size() ? bytes.size() : 1) != 0) return 2;
  if (!bytes.empty()) std::memcpy(data, bytes.data(), bytes.size());
  const uint32_t fast = !match && argc == 3 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 0;

  int status = 0;
  auto payload = delegates::ethosu::parse_payload(data, bytes.size());
  if (!payload.ok()) {
    status = fail(payload.error());
  } else {
    auto stream = ethosu::parse_cop1(payload.value().cmd, payload.value().cmd_size);
    if (!stream.ok()) {
      status = fail(stream.error());
    } else if (match) {
      const auto npu_config = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 0));
      const auto npu_id = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 0));
      auto matched = ethosu::match_target(stream.value(), npu_config, npu_id);
      status = matched.ok() ? (std::printf("ok\n"), 0) : fail(matched.error());
    } else {
      const ethosu::RegionLimit limits[] = {
          {payload.value().weights_size, false}, {payload.value().scratch_size, true}, {fast, true}};
      auto checked = ethosu::check_stream_bounds(stream.value(),
                                                 ethosu::bounds_for(stream.value().config, limits, argc == 3 ? 3 : 2));
      if (checked.ok()) {
        std::printf("ok\n");
      } else {
        status = fail(checked.error());
      }
    }
  }
  std::free(data);
  return status;
}
