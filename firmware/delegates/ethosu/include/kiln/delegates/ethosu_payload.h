// The Ethos-U delegate payload ("vela_bin_stream" of ExecuTorch's EthosUBackend),
// checked block by block. Layout (compiler/kiln/lower/ethosu_payload.py documents the writer):
// blocks of a 32-byte header (name[16] NUL-padded, uint32 data size, uint8 external
// flag, 11 reserved bytes) followed by the data, zero-padded to 16 bytes, in the order
// vela_bin_stream, cmd_data, weight_data, scratch_size, inputs, outputs, vela_end_stream.
// inputs/outputs: int32 count, then per tensor int32 shape[6], elem_size, offset, region.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kiln/runtime/result.h"

namespace kiln::delegates::ethosu {

// Region numbers of Vela's base pointers (BASEP<n>).
constexpr int kWeightsRegion = 0, kScratchRegion = 1, kFastScratchRegion = 2;
// Bytes of one record of the inputs/outputs blocks: int32 shape[6], elem_size, offset, region.
constexpr uint32_t kIoRecordSize = 9 * 4;

// An NPU input or output: `bytes` at `offset` inside the scratch (region 1).
struct IoTensor {
  uint32_t offset = 0;
  uint32_t bytes = 0;
  uint32_t elem_size = 0;
};

// Decodes record `i` of a run of I/O records that parse_payload has validated (no
// checks: i must be below the run's count). Eight loads and seven 32-bit multiplies:
// validation bounded every partial product of the shape by 2^31 and the byte count by
// scratch_size, so these products are exact.
inline IoTensor decode_io(const uint8_t* records, uint32_t i) {
  const uint8_t* record = records + i * kIoRecordSize;
  const auto word = [record](uint32_t n) {
    uint32_t v;
    std::memcpy(&v, record + 4 * n, sizeof(v));
    return v;
  };
  const uint32_t elem_size = word(6);
  const uint32_t elements = word(0) * word(1) * word(2) * word(3) * word(4) * word(5);
  return IoTensor{word(7), elements * elem_size, elem_size};
}

// A checked payload. Borrowed, not owned: every pointer points into the payload bytes
// given to parse_payload, which must outlive this and stay unchanged (normally the
// .pte baked into the image). The I/O tensors are not copied out: input_records and
// output_records point at the records of the inputs/outputs blocks (just after each
// block's int32 count), every one validated by parse_payload, and input(i)/output(i)
// decode record i on each call. Records are 4-byte aligned (block data starts 16-byte
// aligned in the 16-byte aligned payload; records follow the 4-byte count and are
// kIoRecordSize bytes each) but are read with memcpy, so nothing relies on that. This
// struct's size does not depend on the counts.
struct Payload {
  const uint8_t* cmd = nullptr;  // COP1 driver payload, 16-byte aligned
  uint32_t cmd_size = 0;
  const uint8_t* weights = nullptr;  // region 0, 16-byte aligned; may be empty
  uint32_t weights_size = 0;
  uint32_t scratch_size = 0;  // bytes of region 1 the stream needs (holds the I/O)
  uint32_t input_count = 0, output_count = 0;
  const uint8_t* input_records = nullptr;   // input_count records of kIoRecordSize bytes
  const uint8_t* output_records = nullptr;  // output_count records of kIoRecordSize bytes

  // NPU input / output `i`; i must be below input_count / output_count (not checked).
  IoTensor input(uint32_t i) const { return decode_io(input_records, i); }
  IoTensor output(uint32_t i) const { return decode_io(output_records, i); }
};

// Checks every block of `data` (bounds, names, order, sizes, padding, alignment,
// I/O counts against their blocks, and every I/O record: shape, element size, region,
// placement inside the scratch) and returns the checked payload, else
// kDelegateBadPayload (a = runtime::PayloadFault, b = the offset or value it names).
// The COP1 contents themselves are checked by kiln::ethosu::Driver::check.
runtime::Result<Payload> parse_payload(const void* data, size_t size);

}  // namespace kiln::delegates::ethosu
