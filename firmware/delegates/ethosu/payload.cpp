// Bounds-checked reading of the vela_bin_stream payload (see ethosu_payload.h).
// Every offset is checked against the payload size before it is read; sizes are
// added in 64-bit arithmetic so no crafted size can wrap around.
#include "kiln/delegates/ethosu_payload.h"

#include <cstring>

#include "kiln/runtime/try.h"

namespace kiln::delegates::ethosu {
namespace {

using runtime::Error;
using runtime::ErrorCode;
using runtime::PayloadFault;
using runtime::Result;
using runtime::Status;

constexpr uint32_t kAlignment = 16;
constexpr uint32_t kHeaderSize = 32;
constexpr uint32_t kNameSize = 16;
constexpr uint32_t kReservedOffset = 21, kReservedSize = 11;
constexpr uint32_t kShapeDims = 6;
static_assert(kIoRecordSize == (kShapeDims + 3) * 4, "shape[6], elem_size, offset, region");
constexpr uint32_t kCop1Magic = 0x3150'4F43;              // "COP1" little-endian

enum Block { kStreamHeader, kCmdData, kWeightData, kScratchSize, kInputs, kOutputs, kStreamFooter, kBlockCount };
constexpr const char* kBlockNames[kBlockCount] = {"vela_bin_stream", "cmd_data", "weight_data",    "scratch_size",
                                                  "inputs",          "outputs",  "vela_end_stream"};

Error fault(PayloadFault what, uint64_t detail) {
  return Error{ErrorCode::kDelegateBadPayload, static_cast<uint32_t>(what), static_cast<uint32_t>(detail)};
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t padded(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

struct BlockData {
  const uint8_t* data = nullptr;
  uint32_t size = 0;
};

// Reads the header at `pos` (already known to leave room for kHeaderSize bytes);
// checks that it is block `expected` and that its padded data lies inside `size`.
Result<BlockData> read_block(const uint8_t* base, size_t size, uint64_t pos, int expected) {
  const uint8_t* header = base + pos;
  const char* name = kBlockNames[expected];
  const size_t name_length = std::strlen(name);
  // The name is NUL-padded: name bytes, then only NULs up to 16.
  for (uint32_t i = name_length; i < kNameSize; ++i) {
    if (header[i] != 0) {
      return i == name_length ? fault(PayloadFault::kUnexpectedBlock, pos) : fault(PayloadFault::kBadBlockName, pos);
    }
  }
  if (std::memcmp(header, name, name_length) != 0) return fault(PayloadFault::kUnexpectedBlock, pos);
  if (header[kNameSize + 4] != 0) return fault(PayloadFault::kExternalBlock, pos);
  for (uint32_t i = 0; i < kReservedSize; ++i) {
    if (header[kReservedOffset + i] != 0) return fault(PayloadFault::kReservedNotZero, pos);
  }
  const uint32_t data_size = load_u32(header + kNameSize);
  if (pos + kHeaderSize + padded(data_size) > size) return fault(PayloadFault::kDataCutOff, pos);
  return BlockData{header + kHeaderSize, data_size};
}

// Checks one I/O record; decode_io reads it afterwards without checks.
Status check_io(const uint8_t* record, uint32_t scratch_size, uint64_t at) {
  uint64_t elements = 1;
  for (uint32_t d = 0; d < kShapeDims; ++d) {
    const int32_t dim = load_i32(record + 4 * d);
    if (dim < 0) return fault(PayloadFault::kIoShape, static_cast<uint32_t>(dim));
    elements *= static_cast<uint64_t>(dim);
    if (elements > 0x8000'0000u) return fault(PayloadFault::kIoShape, at);
  }
  const int32_t elem_size = load_i32(record + 4 * kShapeDims);
  const int32_t offset = load_i32(record + 4 * kShapeDims + 4);
  const int32_t region = load_i32(record + 4 * kShapeDims + 8);
  if (elem_size != 1 && elem_size != 2 && elem_size != 4) {
    return fault(PayloadFault::kIoElemSize, static_cast<uint32_t>(elem_size));
  }
  if (region != kScratchRegion) return fault(PayloadFault::kIoRegion, static_cast<uint32_t>(region));
  const uint64_t bytes = elements * static_cast<uint64_t>(elem_size);
  if (offset < 0 || static_cast<uint64_t>(offset) + bytes > scratch_size) {
    return fault(PayloadFault::kIoOutsideScratch, static_cast<uint32_t>(offset));
  }
  return Status();
}

struct IoRecords {
  const uint8_t* records = nullptr;
  uint32_t count = 0;
};

// Checks an inputs/outputs block: its count against the block's size (which read_block
// bounded by the payload's), then every record.
Result<IoRecords> read_ios(const BlockData& block, uint32_t scratch_size, uint64_t at) {
  if (block.size < 4) return fault(PayloadFault::kIoBlockSize, block.size);
  const int32_t count = load_i32(block.data);
  if (count < 0 || static_cast<uint32_t>(count) > (block.size - 4) / kIoRecordSize) {
    return fault(PayloadFault::kIoCount, static_cast<uint32_t>(count));
  }
  const uint32_t n = static_cast<uint32_t>(count);
  if (block.size != 4 + n * kIoRecordSize) return fault(PayloadFault::kIoBlockSize, block.size);
  const uint8_t* records = block.data + 4;
  for (uint32_t i = 0; i < n; ++i) KILN_CHECK(check_io(records + i * kIoRecordSize, scratch_size, at));
  return IoRecords{records, n};
}

Status check_contents(const BlockData (&blocks)[kBlockCount], uint64_t footer_at) {
  if (blocks[kStreamHeader].size != 0) {
    return fault(PayloadFault::kMarkerNotEmpty, blocks[kStreamHeader].size);
  }
  if (blocks[kStreamFooter].size != 0) return fault(PayloadFault::kMarkerNotEmpty, footer_at);
  if (blocks[kCmdData].size < 4 || load_u32(blocks[kCmdData].data) != kCop1Magic) {
    return fault(PayloadFault::kNotCop1, blocks[kCmdData].size < 4 ? 0 : load_u32(blocks[kCmdData].data));
  }
  if (blocks[kScratchSize].size != 4) {
    return fault(PayloadFault::kScratchSizeBlock, blocks[kScratchSize].size);
  }
  return Status();
}

}  // namespace

runtime::Result<Payload> parse_payload(const void* data, size_t size) {
  const auto* base = static_cast<const uint8_t*>(data);
  if (reinterpret_cast<uintptr_t>(base) % kAlignment != 0) {
    return fault(PayloadFault::kMisaligned, reinterpret_cast<uintptr_t>(base));
  }
  if (size % kAlignment != 0) return fault(PayloadFault::kSizeNotPadded, size);
  BlockData blocks[kBlockCount];
  uint64_t pos = 0;
  for (int b = 0; b < kBlockCount; ++b) {
    if (pos + kHeaderSize > size) return fault(PayloadFault::kHeaderCutOff, pos);
    KILN_TRY(blocks[b], read_block(base, size, pos, b));
    pos += kHeaderSize + padded(blocks[b].size);
  }
  if (pos != size) return fault(PayloadFault::kTrailingBytes, pos);
  KILN_CHECK(check_contents(blocks, size - kHeaderSize));

  Payload p;
  p.cmd = blocks[kCmdData].data;
  p.cmd_size = blocks[kCmdData].size;
  p.weights = blocks[kWeightData].data;
  p.weights_size = blocks[kWeightData].size;
  p.scratch_size = load_u32(blocks[kScratchSize].data);
  KILN_TRY(const IoRecords inputs, read_ios(blocks[kInputs], p.scratch_size, blocks[kInputs].data - base));
  KILN_TRY(const IoRecords outputs, read_ios(blocks[kOutputs], p.scratch_size, blocks[kOutputs].data - base));
  p.input_records = inputs.records;
  p.input_count = inputs.count;
  p.output_records = outputs.records;
  p.output_count = outputs.count;
  return p;
}

}  // namespace kiln::delegates::ethosu
