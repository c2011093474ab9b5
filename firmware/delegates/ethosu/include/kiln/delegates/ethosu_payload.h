// The Ethos-U delegate payload ("vela_bin_stream" of ExecuTorch's EthosUBackend),
// checked block by block. Layout (compiler/kiln/lower/ethosu_payload.py documents the writer):
// blocks of a 32-byte header (name[16] NUL-padded, uint32 data size, uint8 external
// flag, 11 reserved bytes) followed by the data, zero-padded to 16 bytes, in the order
// vela_bin_stream, cmd_data, weight_data, scratch_size, inputs, outputs, vela_end_stream.
// inputs/outputs: int32 count, then per tensor int32 shape[6], elem_size, offset, region.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/result.h"

namespace kiln::delegates::ethosu {

// At most this many NPU inputs (and as many outputs) per delegate.
constexpr int kMaxIo = 8;
// Region numbers of Vela's base pointers (BASEP<n>).
constexpr int kWeightsRegion = 0, kScratchRegion = 1, kFastScratchRegion = 2;

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
// counts, I/O placement inside the scratch) and returns the decoded payload, else
// kDelegateBadPayload (a = runtime::PayloadFault, b = the offset or value it names).
// The COP1 contents themselves are checked by kiln::ethosu::Driver::check.
runtime::Result<Payload> parse_payload(const void* data, size_t size);

}  // namespace kiln::delegates::ethosu
