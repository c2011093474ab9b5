// Driver::check: the COP1 payload Vela writes (cmd_data), little-endian words:
//   'COP1'; driver actions, each a tag word (action id in bits 7..0) and operands:
//   CONFIG (1): the CONFIG and ID register values the stream was compiled for (each
//               family's layout: kiln/ethosu/registers.h);
//   CMD_STREAM (2): length in words = (tag bits 15..8) << 16 | (tag bits 31..16),
//                   followed by that many command words;
//   READ_APB (3), DUMP_SHRAM (4), NOP (5): no operands (debug actions: ignored).
#include <cstdint>

#include "kiln/ethosu/driver.h"
#include "kiln/ethosu/registers.h"
#include "kiln/runtime/try.h"

namespace kiln::ethosu {
namespace {

constexpr uint32_t kCop1Magic = 0x31504F43;  // "COP1" read as a little-endian word
constexpr uint32_t kActionConfig = 1;
constexpr uint32_t kActionCmdStream = 2;
constexpr uint32_t kActionReadApb = 3;
constexpr uint32_t kActionDumpShram = 4;
constexpr uint32_t kActionNop = 5;
constexpr uintptr_t kStreamAlignment = 16;

struct Parsed {
  bool has_config = false;
  CommandStream stream;
};

uint32_t stream_length_words(uint32_t tag) { return (((tag >> 8) & 0xFF) << 16) | (tag >> 16); }

Result<Parsed> parse(const uint32_t* words, uint32_t count) {
  if (count == 0 || words[0] != kCop1Magic) {
    return Error{ErrorCode::kCop1BadMagic, count == 0 ? 0 : words[0], kCop1Magic};
  }
  Parsed parsed;
  uint32_t i = 1;
  while (i < count) {
    const uint32_t tag = words[i];
    const uint32_t action = tag & 0xFF;
    const uint32_t at = i++;
    if (action == kActionConfig) {
      if (count - i < 2) return Error{ErrorCode::kCop1Truncated, i + 2, count};
      parsed.stream.config = words[i];
      parsed.stream.id = words[i + 1];
      parsed.has_config = true;
      i += 2;
    } else if (action == kActionCmdStream) {
      const uint32_t length = stream_length_words(tag);
      if (length > count - i) return Error{ErrorCode::kCop1Truncated, i + length, count};
      if (parsed.stream.words != nullptr) return Error{ErrorCode::kCop1DuplicateStream, at, 0};
      parsed.stream.words = words + i;
      parsed.stream.size_bytes = length * 4;
      i += length;
    } else if (action != kActionNop && action != kActionReadApb && action != kActionDumpShram) {
      return Error{ErrorCode::kCop1UnknownAction, at, action};
    }
  }
  if (!parsed.has_config) return Error{ErrorCode::kCop1MissingConfig, 0, 0};
  if (parsed.stream.words == nullptr) return Error{ErrorCode::kCop1MissingStream, 0, 0};
  return parsed;
}

}  // namespace

Result<CommandStream> parse_cop1(const void* payload, size_t size) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(payload);
  if (payload == nullptr || address % kStreamAlignment != 0) {
    return Error{ErrorCode::kMisaligned, static_cast<uint32_t>(address), kStreamAlignment};
  }
  const uint32_t words = static_cast<uint32_t>(size / 4);
  if (size % 4 != 0) return Error{ErrorCode::kCop1Truncated, words + 1, words};  // a partial last word
  KILN_TRY(const Parsed parsed, parse(static_cast<const uint32_t*>(payload), words));
  const CommandStream& stream = parsed.stream;
  const uintptr_t stream_address = reinterpret_cast<uintptr_t>(stream.words);
  if (stream_address % kStreamAlignment != 0) {
    return Error{ErrorCode::kMisaligned, static_cast<uint32_t>(stream_address), kStreamAlignment};
  }
  return stream;
}

// The CONFIG fields that make an NPU's configuration beyond its product and MACs: the
// SHRAM size on the U55/U65 (its own error), the AXI ports and weight decoders (cores) on
// the U85 (part of kNpuTargetMismatch: its message shows the ports when they differ).
constexpr uint32_t kU85PortsAndCores = 0x3F00;  // num_axi_sram 9..8, num_axi_ext 10, num_wd 13..12

Status match_target(const CommandStream& stream, uint32_t npu_config, uint32_t npu_id) {
  using namespace reg;
  const uint32_t config = stream.config, id = stream.id;
  const Family* family = family_of(npu_config);
  bool same =
      config_product(config) == config_product(npu_config) && config_macs_log2(config) == config_macs_log2(npu_config);
  if (same && family != nullptr && !family->shram_in_config) {
    same = (config & kU85PortsAndCores) == (npu_config & kU85PortsAndCores);
  }
  if (!same) return Error{ErrorCode::kNpuTargetMismatch, config, npu_config};
  if ((family == nullptr || family->shram_in_config) && config_shram_kib(config) != config_shram_kib(npu_config)) {
    return Error{ErrorCode::kNpuShramMismatch, config_shram_kib(config), config_shram_kib(npu_config)};
  }
  if (config_stream_version(config) != config_stream_version(npu_config)) {
    return Error{ErrorCode::kNpuStreamVersionMismatch, config_stream_version(config),
                 config_stream_version(npu_config)};
  }
  const uint32_t stream_arch = (id_arch_major(id) << 8) | id_arch_minor(id);
  const uint32_t npu_arch = (id_arch_major(npu_id) << 8) | id_arch_minor(npu_id);
  // Same major revision; a newer minor revision of the NPU runs older streams.
  if (id_arch_major(id) != id_arch_major(npu_id) || stream_arch > npu_arch) {
    return Error{ErrorCode::kNpuArchMismatch, stream_arch, npu_arch};
  }
  return {};
}

Result<CommandStream> Driver::check(const void* payload, size_t size) const {
  KILN_TRY(const CommandStream stream, parse_cop1(payload, size));
  KILN_CHECK(match_target(stream, config_, id_));
  return stream;
}

}  // namespace kiln::ethosu
