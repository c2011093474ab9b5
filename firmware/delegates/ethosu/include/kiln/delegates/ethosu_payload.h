// The Ethos-U delegate payload ("vela_bin_stream" of ExecuTorch's EthosUBackend),
// checked block by block. Layout (compiler/ethosu_payload.py documents the writer):
// blocks of a 32-byte header (name[16] NUL-padded, uint32 data size, uint8 external
// flag, 11 reserved bytes) followed by the data, zero-padded to 16 bytes, in the order
// vela_bin_stream, cmd_data, weight_data, scratch_size, inputs, outputs, vela_end_stream.
// inputs/outputs: int32 count, then per tensor int32 shape[6], elem_size, offset, region.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/result.h"

namespace kiln::delegates::ethosu {

// At most this many NPU inputs (and as many outputs) per delegate.
constexpr int kMaxIo = 8;
// Region numbers of Vela's base pointers (BASEP<n>).
constexpr int kWeightsRegion = 0, kScratchRegion = 1, kFastScratchRegion = 2;

// What is wrong with a payload: Error.a when the code is the delegate's payload code
// (see payload_error_code()); Error.b is the offending value (usually a byte offset
// into the payload or the value found).
enum class PayloadFault : uint32_t {
  kMisaligned = 1,        // b = payload address (must be 16-byte aligned)
  kSizeNotPadded,         // b = payload size (not a multiple of 16)
  kHeaderCutOff,          // b = offset of the block header that runs past the end
  kBadBlockName,          // b = offset of a header whose name is not NUL-padded
  kUnexpectedBlock,       // b = offset of a block out of the expected order
  kExternalBlock,         // b = offset of a block stored as named data (unsupported)
  kReservedNotZero,       // b = offset of a header with non-zero reserved bytes
  kDataCutOff,            // b = offset of a block whose data runs past the end
  kTrailingBytes,         // b = offset of bytes after vela_end_stream
  kMarkerNotEmpty,        // b = size of the non-empty vela_bin_stream/vela_end_stream block
  kNotCop1,               // b = first word of cmd_data (COP2 is Ethos-U85's)
  kScratchSizeBlock,      // b = size of the scratch_size block (must be 4)
  kIoBlockSize,           // b = size of an inputs/outputs block that does not match its count
  kIoCount,               // b = count outside 0..kMaxIo
  kIoShape,               // b = a negative dimension, or the block offset when the count passes 2^31
  kIoElemSize,            // b = element size (must be 1, 2 or 4)
  kIoRegion,              // b = region (must be 1, the scratch)
  kIoOutsideScratch,      // b = offset of a tensor that does not lie inside scratch_size
};

const char* payload_fault_name(PayloadFault fault);

// An NPU input or output: `bytes` at `offset` inside the scratch (region 1).
struct IoTensor {
  uint32_t offset = 0;
  uint32_t bytes = 0;
  uint32_t elem_size = 0;
};

// A checked payload. Borrowed: every pointer points into the payload, which must
// outlive this and stay unchanged (it is normally the .pte baked into the image).
struct Payload {
  const uint8_t* cmd = nullptr;  // COP1 driver payload, 16-byte aligned
  uint32_t cmd_size = 0;
  const uint8_t* weights = nullptr;  // region 0, 16-byte aligned; may be empty
  uint32_t weights_size = 0;
  uint32_t scratch_size = 0;  // bytes of region 1 the stream needs (holds the I/O)
  int input_count = 0, output_count = 0;
  IoTensor inputs[kMaxIo];
  IoTensor outputs[kMaxIo];
};

// Checks every block of `data` (bounds, names, order, sizes, padding, alignment,
// counts, I/O placement inside the scratch) and returns the decoded payload. The
// COP1 contents themselves are checked by kiln::ethosu::Driver::check.
Result<Payload> parse_payload(const void* data, size_t size);

// The error code parse_payload returns (a = PayloadFault, b = detail). The backend
// re-reports it as kBackendInitFailed with a = delegate index, b = PayloadFault.
constexpr ErrorCode kPayloadErrorCode = ErrorCode::kBackendInitFailed;
ErrorCode payload_error_code();

}  // namespace kiln::delegates::ethosu
