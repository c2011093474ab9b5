// Errors as values for kiln's firmware: no exceptions, no heap.
//
// An Error is a code that names what went wrong plus up to two 32-bit values
// that the code's description says how to read (e.g. "the stream's value, the
// NPU's value"). Result<T> holds either a T or an Error; Result<void> only
// success or an Error. Every code has a fixed, human-readable name
// (error_name); the module that returns a code documents its values.
#pragma once

#include <cstdint>

namespace kiln {

enum class ErrorCode : uint16_t {
  kOk = 0,
  kInvalidArgument,       // a = which argument (caller-defined index), b = its value
  kMisaligned,            // a = address, b = required alignment in bytes
  kTooLarge,              // a = size asked for, b = the limit
  // The COP1 payload Vela writes (driver actions around a command stream).
  kCop1BadMagic,          // a = first word found, b = the expected 'COP1' word
  kCop1Truncated,         // a = word index where data ran out, b = payload length in words
  kCop1UnknownAction,     // a = word index of the action, b = the action id
  kCop1MissingConfig,     // no optimizer-config action
  kCop1MissingStream,     // no command-stream action
  kCop1DuplicateStream,   // a = word index of the second stream
  // The NPU and a stream compiled for another configuration: a = stream, b = NPU.
  kNpuNotFound,           // a = the ID register read, b = the NPU base address
  kNpuProductMismatch,    // product (0 = Ethos-U55, 1 = Ethos-U65)
  kNpuMacsMismatch,       // MACs per cycle
  kNpuShramMismatch,      // SHRAM size in KiB
  kNpuStreamVersionMismatch,  // command stream version
  kNpuArchMismatch,       // architecture revision (major << 8 | minor)
  // Running a stream: a = STATUS register, b = QREAD (bytes of stream consumed).
  kNpuBusy,               // the NPU was running when a new stream was started
  kNpuFault,              // STATUS has a fault bit (bus_status, cmd_parse_error, wd/ecc_fault)
  kNpuIncomplete,         // stopped without cmd_end_reached and without a fault bit
  kNpuTimeout,            // no completion interrupt in time; b = the timeout in ms
  kNpuResetFailed,        // a = STATUS after the reset, b = PROT after the reset
};

constexpr const char* error_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kMisaligned: return "misaligned address";
    case ErrorCode::kTooLarge: return "too large";
    case ErrorCode::kCop1BadMagic: return "not a COP1 payload";
    case ErrorCode::kCop1Truncated: return "COP1 payload truncated";
    case ErrorCode::kCop1UnknownAction: return "COP1 payload has an unknown driver action";
    case ErrorCode::kCop1MissingConfig: return "COP1 payload has no NPU configuration";
    case ErrorCode::kCop1MissingStream: return "COP1 payload has no command stream";
    case ErrorCode::kCop1DuplicateStream: return "COP1 payload has two command streams";
    case ErrorCode::kNpuNotFound: return "no Ethos-U NPU at this address";
    case ErrorCode::kNpuProductMismatch: return "stream compiled for another NPU product";
    case ErrorCode::kNpuMacsMismatch: return "stream compiled for another MAC count";
    case ErrorCode::kNpuShramMismatch: return "stream compiled for another SHRAM size";
    case ErrorCode::kNpuStreamVersionMismatch:
      return "stream compiled for another command stream version";
    case ErrorCode::kNpuArchMismatch: return "stream compiled for another NPU architecture";
    case ErrorCode::kNpuBusy: return "NPU busy";
    case ErrorCode::kNpuFault: return "NPU fault";
    case ErrorCode::kNpuIncomplete: return "NPU stopped before the end of the stream";
    case ErrorCode::kNpuTimeout: return "NPU timeout";
    case ErrorCode::kNpuResetFailed: return "NPU reset failed";
  }
  return "unknown error";
}

struct Error {
  ErrorCode code = ErrorCode::kOk;
  uint32_t a = 0;  // meaning per code (see ErrorCode)
  uint32_t b = 0;
};

// Either a value or an Error. T must be default-constructible and copyable
// (it is stored by value next to the Error; no heap, no placement tricks).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : value_(value) {}  // NOLINT: implicit on purpose
  Result(const Error& error) : error_(error) {}  // NOLINT
  bool ok() const { return error_.code == ErrorCode::kOk; }
  // Only meaningful when ok().
  const T& value() const { return value_; }
  T& value() { return value_; }
  const Error& error() const { return error_; }

 private:
  T value_{};
  Error error_{};
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(const Error& error) : error_(error) {}  // NOLINT
  bool ok() const { return error_.code == ErrorCode::kOk; }
  const Error& error() const { return error_; }

 private:
  Error error_{};
};

using Status = Result<void>;

}  // namespace kiln
