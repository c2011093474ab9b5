// kiln's one error model for the firmware: no exceptions, no heap.
//
// Every layer (the loader, the method, the CPU kernels, the Ethos-U delegate and
// driver, the platform) reports a failure as an Error: a code from the one list
// below plus two 32-bit values, `a` and `b`, whose meaning the code's comment gives.
// Codes are numbered in ranges, one per layer, so `layer_of(code)` names where it
// arose:
//
//   0x000..0x0FF  general    ok, internal, arguments, alignment, sizes
//   0x100..0x1FF  loader     Program::load (the .pte)
//   0x200..0x2FF  method     Method::create and Method::execute
//   0x300..0x3FF  kernel     the CPU kernels
//   0x400..0x4FF  delegate   the EthosUBackend delegate (payload, scratch, arguments)
//   0x500..0x5FF  driver     the Ethos-U driver (COP1 payload, the NPU)
//   0x600..0x6FF  platform   reserved for the board's platform layer
//
// A code with a named detail carries it in `a` (one of the enums below, each with a
// to_string) and the value it is about in `b`. Every code and every detail has a
// fixed name (to_string); print_error writes an Error on one line (see Text below).
// Result<T> (kiln/runtime/result.h) carries an Error or a value.
#pragma once

#include <cstdint>

namespace kiln::runtime {

enum class ErrorCode : uint16_t {
  // General.
  kOk = 0x000,
  kInternal = 0x001,          // a bug in kiln: an error was made from kOk (a = 0, b = 0)
  kInvalidArgument = 0x002,   // a = which argument (the function documents it), b = its value
  kMisaligned = 0x003,        // a = address, b = required alignment in bytes
  kTooLarge = 0x004,          // a = size asked for, b = the limit

  // Loader: Program::load. Offsets are file offsets.
  kPteTooShort = 0x100,       // a = the file's size, b = the size needed
  kPteBadIdentifier = 0x101,  // a = the identifier word found, b = the expected 'ET12' word
  kPteBadHeader = 0x102,      // the eh00 header: a = HeaderField, b = its value (low 32 bits)
  kPteOutOfBounds = 0x103,    // a = offset of the data, b = the size of the area it must lie in
  kPteBadTable = 0x104,       // a FlatBuffer table or vtable is malformed: a = its offset, b = size
  kPteMisaligned = 0x105,     // a vector not aligned to its element: a = offset, b = alignment
  kPteBadString = 0x106,      // a string without its NUL terminator: a = its offset
  kPteBadUnion = 0x107,       // a = offset of the union's table, b = the type code
  kPteBadEnum = 0x108,        // an enum field out of range: a = offset of its table, b = value
  kPteBadIndex = 0x109,       // a cross-reference out of range: a = the index, b = the count
  kPteBadTensor = 0x10A,      // a = TensorDefect, b = the tensor's value index
  kPteMissingField = 0x10B,   // a required field is absent: a = offset of its table, b = slot
  kPteUnsupported = 0x10C,    // valid but unsupported: a = Feature, b = detail (see Feature)
  kPteTooComplex = 0x10D,     // tables and vectors overlap far beyond any valid file: a = offset
  kPteStateSize = 0x10E,      // plans declare state arenas (memory id 2) of different sizes: a = the
                              // plan, b = its size (low 32 bits; see kiln/runtime/program.h)

  // Method: binding (Method::create) and running (execute).
  kMethodStorageTooSmall = 0x200,  // a = entries needed, b = entries given (values, kernels or delegates)
  kMethodBufferMissing = 0x201,    // a planned buffer not supplied: a = memory id (2: the state
                                   // arena), b = buffers given
  kMethodBufferTooSmall = 0x202,   // a = memory id, b = bytes needed (low 32 bits)
  kMethodMissingKernel = 0x203,    // no kernel for an operator: a = operator index
  kMethodMissingBackend = 0x204,   // no backend for a delegate: a = delegate index
  kMethodBadValue = 0x205,         // a value is not of the kind its use needs: a = value index, b = kind
  kMethodBadInstruction = 0x206,   // a = InstructionDefect, b = instruction index
  kMethodNoData = 0x207,           // a tensor has no data pointer yet: a = value index
  kMethodBadInput = 0x208,         // set_input: a = input index, b = bytes given
  // 0x209: retired (kMethodStepLimit; jumps go forward only, so a run is at most one pass)
  kMethodRepeatedIo = 0x20A,  // a value listed twice as a program input (b = 0) or output (b = 1): a = value index
  kMethodOutputWithoutMemory = 0x20B,  // a program output with neither planned memory nor constant data:
                                       // a = output position, b = value index
  kMethodWorkBudget = 0x20C,  // execute's work budget exhausted: a = instruction index, b = the budget
                              // in elements (saturated at 2^32 - 1; see Method::set_work_budget)
  kMethodNotFound = 0x20D,  // no such method (execution plan): a = the index asked for (2^32 - 1 when
                            // asked by name), b = the program's method count

  // CPU kernels: a = which argument (position in the call), b = the offending value
  // (a size or a count; 0 when there is none).
  kKernelBadArgument = 0x300,  // b = its ValueKind (wrong kind), 0x100 + its ScalarType
                               // (wrong type) or 0x200 (a tensor without data)
  kKernelShapeMismatch = 0x301,  // sizes inconsistent with the operator's semantics
  kKernelUnsupported = 0x302,  // arguments outside what the kernel implements (b = 0x400: a
                               // channels-last tensor where it reads only contiguous ones)

  // The EthosUBackend delegate.
  kDelegateInitFailed = 0x400,  // a = DelegateFault, b = the delegate's index
  kDelegateBadPayload = 0x401,  // a = PayloadFault, b = its value (see PayloadFault)
  kDelegateBadArgument = 0x402,  // a = DelegateFault, b = argument position (count for kArgumentCount)

  // The Ethos-U driver. The COP1 payload Vela writes (driver actions around a stream):
  kCop1BadMagic = 0x500,  // a = first word found, b = the expected 'COP1' word
  kCop1Truncated = 0x501,  // a = words the payload needs, b = its length in whole words
  kCop1UnknownAction = 0x502,  // a = word index of the action, b = the action id
  kCop1MissingConfig = 0x503,  // no optimizer-config action
  kCop1MissingStream = 0x504,  // no command-stream action
  kCop1DuplicateStream = 0x505,  // a = word index of the second stream
  // The NPU and a stream compiled for another configuration: a = stream's, b = NPU's.
  kNpuNotFound = 0x510,  // a = the ID register read, b = the NPU base address
  // 0x511, 0x512: retired (kNpuProductMismatch, kNpuMacsMismatch: one code, 0x516, names both)
  kNpuShramMismatch = 0x513,  // SHRAM size in KiB
  kNpuStreamVersionMismatch = 0x514,  // command stream version
  kNpuArchMismatch = 0x515,  // architecture revision (major << 8 | minor)
  kNpuTargetMismatch = 0x516,  // another family or MAC count (or U85 AXI ports/cores):
                               // a = the stream's CONFIG word, b = the NPU's
  // Running a stream: a = STATUS register, b = QREAD (bytes of stream consumed).
  kNpuBusy = 0x520,  // the NPU was running when a new stream was started
  kNpuFault = 0x521,  // STATUS has a fault bit of its family (bus_status, cmd_parse_error,
  // ecc_fault; wd_fault on the U55/U65, branch_fault on the U85)
  kNpuIncomplete = 0x522,  // stopped without cmd_end_reached and without a fault bit
  kNpuTimeout = 0x523,  // no completion interrupt in time; b = the timeout in ms
  kNpuResetFailed = 0x524,  // a = STATUS after the reset, b = PROT after the reset
  // The stream's memory accesses (Driver::check_bounds, at delegate init):
  kNpuStreamUnprovable = 0x530,  // a command the check cannot follow: a = word index, b = the word
  kNpuAccessOutside = 0x531,  // an access past its region's buffer: a = NpuAccess, b = word index
  kNpuAccessNoRegion = 0x532,  // an access to a region with no buffer: a = NpuAccess, b = word index
  kNpuAccessReadOnly = 0x533,  // a write to a read-only region (the weights): a = NpuAccess, b = word index
};

enum class Layer : uint8_t {
  kGeneral = 0,
  kLoader = 1,
  kMethod = 2,
  kKernel = 3,
  kDelegate = 4,
  kDriver = 5,
  kPlatform = 6,
};
constexpr Layer layer_of(ErrorCode code) { return static_cast<Layer>(static_cast<uint16_t>(code) >> 8); }

// --- Details: the `a` of the codes that name one --------------------------------------

// kPteBadHeader: which field of the eh00 extended header.
enum class HeaderField : uint32_t {
  kLength = 1,
  kProgramSize = 2,
  kSegmentBaseOffset = 3,
  kSegmentDataSize = 4,
};

// kPteUnsupported: a valid .pte feature kiln's runtime does not implement; b as noted.
enum class Feature : uint32_t {
  kNoExecutionPlan = 1,  // the program has no execution plan
  kMutableDataSegments = 2,  // mutable tensors with initial state
  kNonConstBufferDevice = 3,  // planned buffers on another device
  kExtraTensorInfo = 4,  // extra tensor info of data outside the .pte or on another device (b = value index)
  kDimOrder = 5,  // a dim order neither contiguous nor channels-last (types.h: DimOrder; b = value index)
  kDynamicShape = 6,  // shape_dynamism != STATIC (b = value index)
  kChains = 7,  // a plan of not exactly one chain (b = count)
  kBothConstantKinds = 8,  // constant_buffer and constant_segment both hold data
  kNonTensorIo = 9,  // a plan input or output that is not a tensor (b = position)
  kBackwardJump = 10,  // a jump to itself or an earlier instruction, a loop (b = the jump's index)
};

// kPteBadTensor: what is wrong with a tensor of the plan.
enum class TensorDefect : uint32_t {
  kNegativeSize = 1,  // a size below zero
  kTooManyDims = 2,  // more than kMaxDims sizes
  kDimOrderLength = 3,  // dim_order's length differs from the sizes'
  kTooLarge = 4,  // more than 2^32 - 1 bytes
  kConstantTooSmall = 5,  // its constant holds fewer bytes than the tensor
  kConstantAndPlanned = 6,  // both a constant and a planned allocation
  kBadMemoryId = 7,  // its planned buffer's memory id is 0 or past the list
  kOutsideBuffer = 8,  // it does not lie inside its planned buffer
  kMisaligned = 9,  // its data is not aligned to its element size
};

// kMethodBadInstruction: what is wrong with an instruction of the chain.
enum class InstructionDefect : uint32_t {
  kKernelWithoutOut = 1,  // a kernel call's arguments lack the out tensor
  // 2: retired (kTooManyDelegateArgs; a delegate call takes any number of arguments)
  kConditionNotBool = 3,  // a jump's condition is not a Bool
  kMoveKindMismatch = 4,  // a move between values of different kinds
  kUnknownKind = 5,  // an instruction kind the executor does not run
};

// kDelegateInitFailed / kDelegateBadArgument: what the delegate refused.
enum class DelegateFault : uint32_t {
  kPoolFull = 1,  // init: the app's pool of delegate states is full
  kScratchTooSmall = 2,  // init: the scratch is smaller than the payload's scratch_size
  kFastScratchTooSmall = 3,  // init: the fast scratch is smaller than the delegate needs
  kScratchMisaligned = 4,  // init: the scratch or fast scratch is not whole D-cache lines
  kArgumentCount = 5,  // execute: not the payload's inputs + outputs (b = the count)
  kConstantOutput = 6,  // execute: an output argument is a constant of the program
  kArgumentSize = 7,  // execute: an argument's bytes differ from the NPU tensor's
};

// kDelegateBadPayload: what is wrong with a vela_bin_stream payload; b as noted.
enum class PayloadFault : uint32_t {
  kMisaligned = 1,  // b = payload address (must be 16-byte aligned)
  kSizeNotPadded = 2,  // b = payload size (not a multiple of 16)
  kHeaderCutOff = 3,  // b = offset of the block header that runs past the end
  kBadBlockName = 4,  // b = offset of a header whose name is not NUL-padded
  kUnexpectedBlock = 5,  // b = offset of a block out of the expected order
  kExternalBlock = 6,  // b = offset of a block stored as named data (unsupported)
  kReservedNotZero = 7,  // b = offset of a header with non-zero reserved bytes
  kDataCutOff = 8,  // b = offset of a block whose data runs past the end
  kTrailingBytes = 9,  // b = offset of bytes after vela_end_stream
  kMarkerNotEmpty = 10,  // b = size of the non-empty vela_bin_stream/vela_end_stream block
  kNotCop1 = 11,  // b = first word of cmd_data (COP2 is Ethos-U85's)
  kScratchSizeBlock = 12,  // b = size of the scratch_size block (must be 4)
  kIoBlockSize = 13,  // b = size of an inputs/outputs block that does not match its count
  kIoCount = 14,  // b = an inputs/outputs count below 0 or more records than its block holds
  kIoShape = 15,  // b = a negative dimension, or the block offset when the count passes 2^31
  kIoElemSize = 16,  // b = element size (must be 1, 2 or 4)
  kIoRegion = 17,  // b = region (must be 1, the scratch)
  kIoOutsideScratch = 18,  // b = offset of a tensor that does not lie inside scratch_size
};

// An error: what went wrong (code) and two values the code's comment explains.
// Trivially copyable, 12 bytes. Default-constructed it is kInternal, never ok.
struct Error {
  ErrorCode code = ErrorCode::kInternal;
  uint32_t a = 0;
  uint32_t b = 0;
};

// kNpuAccess*: which memory access of a command stream's operation (word index in b).
enum class NpuAccess : uint32_t {
  kIfm = 1,
  kIfm2 = 2,
  kOfm = 3,
  kWeights = 4,
  kWeights1 = 5,
  kScales = 6,
  kScales1 = 7,
  kDmaSource = 8,
  kDmaDestination = 9,
  kWeights2 = 10,
  kWeights3 = 11,  // cores 2, 3: Ethos-U85
  kDmaIndex = 12,  // an Ethos-U85 gather's or scatter's index table
};

// --- Text ---------------------------------------------------------------------------
// Declared here, defined by the kiln_error_text library (src/error_text.cpp), which an
// app links when it prints errors; the loader, the method and the driver themselves
// never print, so a build without it keeps only the codes.

// Fixed, human-readable names (static strings; "unknown ..." for a value outside the enum).
const char* to_string(ErrorCode code);
const char* to_string(HeaderField field);
const char* to_string(Feature feature);
const char* to_string(TensorDefect defect);
const char* to_string(InstructionDefect defect);
const char* to_string(DelegateFault fault);
const char* to_string(PayloadFault fault);
const char* to_string(NpuAccess access);

// Writes `error` through the platform's console (kiln::print) as one line ending in
// '\n': its name, then its detail or values as its code's comment describes them, e.g.
//   "pte: malformed tensor: outside its planned buffer (value 3)"
//   "NPU fault: STATUS=0x00000012 (irq_raised, cmd_parse_error), QREAD=0"
// The one printer for every layer's errors: callers put their own context before it.
void print_error(const Error& error);

}  // namespace kiln::runtime
