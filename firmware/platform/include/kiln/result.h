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
  // Loading a .pte (kiln::runtime::Program::load). Offsets are file offsets.
  kPteTooShort,           // a = the file's size, b = the size needed
  kPteBadIdentifier,      // a = the identifier word found, b = the expected 'ET12' word
  kPteBadHeader,          // the eh00 header: a = which field (see program.h), b = its value
  kPteOutOfBounds,        // a = offset of the data, b = the size of the area it must lie in
  kPteBadTable,           // a FlatBuffer table or vtable is malformed: a = its offset, b = size
  kPteMisaligned,         // a vector not aligned to its element: a = offset, b = alignment
  kPteBadString,          // a string without its NUL terminator: a = its offset
  kPteBadUnion,           // a = offset of the union's table, b = the type code
  kPteBadEnum,            // an enum field out of range: a = offset of its table, b = value
  kPteBadIndex,           // a cross-reference out of range: a = the index, b = the count
  kPteBadTensor,          // a tensor's sizes/dim_order/data: a = value index, b = detail
                          // (see program.cpp: ProgramLoader::tensor)
  kPteMissingField,       // a required field is absent: a = offset of its table, b = slot
  kPteUnsupported,        // valid but unsupported: a = feature (see program.h), b = value
  kPteTooComplex,         // tables and vectors overlap far beyond any valid file: a = budget
  // Binding and running a method (kiln::runtime::Method).
  kMethodStorageTooSmall,   // a = entries needed, b = entries given (values or delegates)
  kMethodBufferMissing,     // a planned buffer not supplied: a = memory id, b = buffers given
  kMethodBufferTooSmall,    // a = memory id, b = bytes needed
  kMethodMissingKernel,     // no kernel for an operator: a = operator index
  kMethodMissingBackend,    // no backend for a delegate: a = delegate index
  kMethodBadValue,          // a value is not of the kind its use needs: a = value index, b = kind
  kMethodBadInstruction,    // a = instruction index, b = detail (see method.h)
  kMethodNoData,            // a tensor has no data pointer yet: a = value index
  kMethodBadInput,          // set_input: a = input index, b = bytes given
  kMethodStepLimit,         // execute ran more instructions than allowed: a = the limit
  // CPU kernels: a = which argument (position in the call), b = detail.
  kKernelBadArgument,       // wrong kind or scalar type
  kKernelShapeMismatch,     // sizes inconsistent with the operator's semantics
  kKernelUnsupported,       // arguments outside what the kernel implements
  // Backends.
  kBackendInitFailed,       // a = delegate index, b = backend-defined detail
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
    case ErrorCode::kPteTooShort: return "pte: file too short";
    case ErrorCode::kPteBadIdentifier: return "pte: not an ExecuTorch program (identifier)";
    case ErrorCode::kPteBadHeader: return "pte: bad extended header";
    case ErrorCode::kPteOutOfBounds: return "pte: offset or size out of bounds";
    case ErrorCode::kPteBadTable: return "pte: malformed table";
    case ErrorCode::kPteMisaligned: return "pte: misaligned vector";
    case ErrorCode::kPteBadString: return "pte: string not NUL-terminated";
    case ErrorCode::kPteBadUnion: return "pte: unknown union type";
    case ErrorCode::kPteBadEnum: return "pte: enum value out of range";
    case ErrorCode::kPteBadIndex: return "pte: index out of range";
    case ErrorCode::kPteBadTensor: return "pte: malformed tensor";
    case ErrorCode::kPteMissingField: return "pte: required field missing";
    case ErrorCode::kPteUnsupported: return "pte: unsupported feature";
    case ErrorCode::kPteTooComplex: return "pte: overlapping tables beyond any valid file";
    case ErrorCode::kMethodStorageTooSmall: return "method: value/delegate storage too small";
    case ErrorCode::kMethodBufferMissing: return "method: planned buffer not supplied";
    case ErrorCode::kMethodBufferTooSmall: return "method: planned buffer too small";
    case ErrorCode::kMethodMissingKernel: return "method: no kernel for operator";
    case ErrorCode::kMethodMissingBackend: return "method: no backend for delegate";
    case ErrorCode::kMethodBadValue: return "method: value of the wrong kind";
    case ErrorCode::kMethodBadInstruction: return "method: bad instruction";
    case ErrorCode::kMethodNoData: return "method: tensor has no data";
    case ErrorCode::kMethodBadInput: return "method: bad input";
    case ErrorCode::kMethodStepLimit: return "method: instruction limit reached";
    case ErrorCode::kKernelBadArgument: return "kernel: bad argument";
    case ErrorCode::kKernelShapeMismatch: return "kernel: shape mismatch";
    case ErrorCode::kKernelUnsupported: return "kernel: unsupported arguments";
    case ErrorCode::kBackendInitFailed: return "backend: init failed";
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
