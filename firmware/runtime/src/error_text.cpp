// The error model's text: the name of every error code and detail, and the one printer.
#include "kiln/runtime/error.h"

#include "kiln/platform.h"

namespace kiln::runtime {

static_assert(sizeof(Error) == 12, "an Error is a code and two words");
static_assert(layer_of(ErrorCode::kTooLarge) == Layer::kGeneral &&
                  layer_of(ErrorCode::kPteTooComplex) == Layer::kLoader &&
                  layer_of(ErrorCode::kMethodWorkBudget) == Layer::kMethod &&
                  layer_of(ErrorCode::kKernelUnsupported) == Layer::kKernel &&
                  layer_of(ErrorCode::kDelegateBadArgument) == Layer::kDelegate &&
                  layer_of(ErrorCode::kNpuResetFailed) == Layer::kDriver,
              "each code lies in its layer's range");

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInternal: return "internal error: an error made from kOk";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kMisaligned: return "misaligned address";
    case ErrorCode::kTooLarge: return "too large";
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
    case ErrorCode::kMethodStorageTooSmall: return "method: value/kernel/delegate storage too small";
    case ErrorCode::kMethodBufferMissing: return "method: planned buffer not supplied";
    case ErrorCode::kMethodBufferTooSmall: return "method: planned buffer too small";
    case ErrorCode::kMethodMissingKernel: return "method: no kernel for operator";
    case ErrorCode::kMethodMissingBackend: return "method: no backend for delegate";
    case ErrorCode::kMethodBadValue: return "method: value of the wrong kind";
    case ErrorCode::kMethodBadInstruction: return "method: bad instruction";
    case ErrorCode::kMethodNoData: return "method: tensor has no data";
    case ErrorCode::kMethodBadInput: return "method: bad input";
    case ErrorCode::kMethodRepeatedIo: return "method: a value listed twice as a program input or output";
    case ErrorCode::kMethodOutputWithoutMemory: return "method: program output without memory";
    case ErrorCode::kMethodWorkBudget: return "method: work budget exhausted";
    case ErrorCode::kKernelBadArgument: return "kernel: bad argument";
    case ErrorCode::kKernelShapeMismatch: return "kernel: shape mismatch";
    case ErrorCode::kKernelUnsupported: return "kernel: unsupported arguments";
    case ErrorCode::kDelegateInitFailed: return "delegate: init failed";
    case ErrorCode::kDelegateBadPayload: return "delegate: bad payload";
    case ErrorCode::kDelegateBadArgument: return "delegate: bad argument";
    case ErrorCode::kCop1BadMagic: return "not a COP1 payload";
    case ErrorCode::kCop1Truncated: return "COP1 payload truncated";
    case ErrorCode::kCop1UnknownAction: return "COP1 payload has an unknown driver action";
    case ErrorCode::kCop1MissingConfig: return "COP1 payload has no NPU configuration";
    case ErrorCode::kCop1MissingStream: return "COP1 payload has no command stream";
    case ErrorCode::kCop1DuplicateStream: return "COP1 payload has two command streams";
    case ErrorCode::kNpuNotFound: return "no Ethos-U NPU at this address";
    case ErrorCode::kNpuTargetMismatch: return "stream compiled for another NPU";
    case ErrorCode::kNpuShramMismatch: return "stream compiled for another SHRAM size";
    case ErrorCode::kNpuStreamVersionMismatch: return "stream compiled for another command stream version";
    case ErrorCode::kNpuArchMismatch: return "stream compiled for another NPU architecture";
    case ErrorCode::kNpuBusy: return "NPU busy";
    case ErrorCode::kNpuFault: return "NPU fault";
    case ErrorCode::kNpuIncomplete: return "NPU stopped before the end of the stream";
    case ErrorCode::kNpuTimeout: return "NPU timeout";
    case ErrorCode::kNpuResetFailed: return "NPU reset failed";
    case ErrorCode::kNpuStreamUnprovable: return "NPU stream has a command the bounds check cannot follow";
    case ErrorCode::kNpuAccessOutside: return "NPU stream accesses memory outside its region's buffer";
    case ErrorCode::kNpuAccessNoRegion: return "NPU stream accesses a region with no buffer";
    case ErrorCode::kNpuAccessReadOnly: return "NPU stream writes the read-only weights region";
  }
  return "unknown error";
}

const char* to_string(HeaderField field) {
  switch (field) {
    case HeaderField::kLength: return "header length";
    case HeaderField::kProgramSize: return "program_size";
    case HeaderField::kSegmentBaseOffset: return "segment_base_offset";
    case HeaderField::kSegmentDataSize: return "segment_data_size";
  }
  return "unknown header field";
}

const char* to_string(Feature feature) {
  switch (feature) {
    case Feature::kNoExecutionPlan: return "no execution plan";
    case Feature::kMutableDataSegments: return "mutable data segments";
    case Feature::kNonConstBufferDevice: return "planned buffers on another device";
    case Feature::kExtraTensorInfo: return "external or mutable tensor data";
    case Feature::kDimOrder: return "non-identity dim order";
    case Feature::kDynamicShape: return "dynamic shape";
    case Feature::kChains: return "not exactly one chain";
    case Feature::kBothConstantKinds: return "constant_buffer and constant_segment both used";
    case Feature::kNonTensorIo: return "a program input or output that is not a tensor";
    case Feature::kBackwardJump: return "a jump backwards (a loop)";
  }
  return "unknown feature";
}

const char* to_string(TensorDefect defect) {
  switch (defect) {
    case TensorDefect::kNegativeSize: return "negative size";
    case TensorDefect::kTooManyDims: return "too many dimensions";
    case TensorDefect::kDimOrderLength: return "dim_order length differs from sizes";
    case TensorDefect::kTooLarge: return "more than 4 GiB";
    case TensorDefect::kConstantTooSmall: return "constant data too small";
    case TensorDefect::kConstantAndPlanned: return "both constant and planned";
    case TensorDefect::kBadMemoryId: return "no such planned buffer";
    case TensorDefect::kOutsideBuffer: return "outside its planned buffer";
    case TensorDefect::kMisaligned: return "data misaligned for its element size";
  }
  return "unknown tensor defect";
}

const char* to_string(InstructionDefect defect) {
  switch (defect) {
    case InstructionDefect::kKernelWithoutOut: return "kernel call without an out tensor";
    case InstructionDefect::kConditionNotBool: return "jump condition not a bool";
    case InstructionDefect::kMoveKindMismatch: return "move between values of different kinds";
    case InstructionDefect::kUnknownKind: return "unknown instruction kind";
  }
  return "unknown instruction defect";
}

const char* to_string(DelegateFault fault) {
  switch (fault) {
    case DelegateFault::kPoolFull: return "the delegate pool is full";
    case DelegateFault::kScratchTooSmall: return "scratch too small";
    case DelegateFault::kFastScratchTooSmall: return "fast scratch too small";
    case DelegateFault::kScratchMisaligned: return "scratch not whole D-cache lines";
    case DelegateFault::kArgumentCount: return "wrong argument count";
    case DelegateFault::kConstantOutput: return "output is a constant of the program";
    case DelegateFault::kArgumentSize: return "argument size differs from the NPU tensor's";
  }
  return "unknown delegate fault";
}

const char* to_string(PayloadFault fault) {
  switch (fault) {
    case PayloadFault::kMisaligned: return "payload not 16-byte aligned";
    case PayloadFault::kSizeNotPadded: return "payload size not a multiple of 16";
    case PayloadFault::kHeaderCutOff: return "block header cut off";
    case PayloadFault::kBadBlockName: return "block name not NUL-padded";
    case PayloadFault::kUnexpectedBlock: return "block out of order or unknown";
    case PayloadFault::kExternalBlock: return "block stored as named data (not supported)";
    case PayloadFault::kReservedNotZero: return "block header's reserved bytes not zero";
    case PayloadFault::kDataCutOff: return "block data runs past the end of the payload";
    case PayloadFault::kTrailingBytes: return "bytes after vela_end_stream";
    case PayloadFault::kMarkerNotEmpty: return "vela_bin_stream/vela_end_stream block not empty";
    case PayloadFault::kNotCop1: return "cmd_data is not a COP1 command stream";
    case PayloadFault::kScratchSizeBlock: return "scratch_size block is not 4 bytes";
    case PayloadFault::kIoBlockSize: return "inputs/outputs block size does not match its count";
    case PayloadFault::kIoCount: return "NPU input/output count does not fit its block";
    case PayloadFault::kIoShape: return "NPU tensor shape invalid";
    case PayloadFault::kIoElemSize: return "NPU tensor element size not 1, 2 or 4";
    case PayloadFault::kIoRegion: return "NPU tensor not in the scratch region";
    case PayloadFault::kIoOutsideScratch: return "NPU tensor outside the scratch";
  }
  return "unknown payload fault";
}

const char* to_string(NpuAccess access) {
  switch (access) {
    case NpuAccess::kIfm: return "IFM read";
    case NpuAccess::kIfm2: return "IFM2 read";
    case NpuAccess::kOfm: return "OFM write";
    case NpuAccess::kWeights: return "weight read";
    case NpuAccess::kWeights1: return "weight read (core 1)";
    case NpuAccess::kScales: return "scale read";
    case NpuAccess::kScales1: return "scale read (core 1)";
    case NpuAccess::kDmaSource: return "DMA source read";
    case NpuAccess::kDmaDestination: return "DMA destination write";
    case NpuAccess::kWeights2: return "weight read (core 2)";
    case NpuAccess::kWeights3: return "weight read (core 3)";
    case NpuAccess::kDmaIndex: return "DMA index read";
  }
  return "unknown NPU access";
}

namespace {

// The Ethos-U STATUS register's bits 0..9: bit 7 is the U55/U65's (reserved on the U85),
// bit 9 the U85's (reserved on the U55/U65), so one list names every family's bits.
const char* const kStatusBitNames[] = {
    "running", "irq_raised", "bus_status", "reset_status", "cmd_parse_error",
    "cmd_end_reached", "pmu_irq_raised", "wd_fault", "ecc_fault", "branch_fault",
};

void print_status_bits(unsigned status) {
  const char* separator = "";
  for (unsigned bit = 0; bit < sizeof(kStatusBitNames) / sizeof(kStatusBitNames[0]); ++bit) {
    if (!(status & (1u << bit))) continue;
    print("%s%s", separator, kStatusBitNames[bit]);
    separator = ", ";
  }
}

// An NPU as a CONFIG register word describes it: its product (bits 31..28: 0 Ethos-U55,
// 1 Ethos-U65, 2 Ethos-U85; any other as its number) and MACs per cycle (2^bits 3..0);
// `ports`: also an Ethos-U85's AXI ports (2^bits 9..8 SRAM, 2^bit 10 external).
// `article`: "an Ethos-U55 ..." / "an NPU of product 7 ..." rather than "Ethos-U55 ...".
void print_npu(unsigned config, bool ports, bool article) {
  static const char* const kProducts[] = {"Ethos-U55", "Ethos-U65", "Ethos-U85"};
  const unsigned product = config >> 28;
  if (product < 3) {
    print("%s%s with %u MACs", article ? "an " : "", kProducts[product], 1u << (config & 0xF));
  } else {
    print("%sproduct %u with %u MACs", article ? "an NPU of " : "", product, 1u << (config & 0xF));
  }
  if (ports) print(" (%u SRAM and %u external AXI ports)", 1u << ((config >> 8) & 3), 1u << ((config >> 10) & 1));
}

}  // namespace

void print_error(const Error& error) {
  print("%s", to_string(error.code));
  const unsigned a = error.a, b = error.b;
  switch (error.code) {
    case ErrorCode::kMisaligned:
      print(": address 0x%08x, alignment %u", a, b);
      break;
    case ErrorCode::kPteBadIdentifier:
    case ErrorCode::kCop1BadMagic:
      print(": found 0x%08x, expected 0x%08x", a, b);
      break;
    case ErrorCode::kPteBadHeader:
      print(": %s %u", to_string(static_cast<HeaderField>(a)), b);
      break;
    case ErrorCode::kPteUnsupported:
      print(": %s (%u)", to_string(static_cast<Feature>(a)), b);
      break;
    case ErrorCode::kPteBadTensor:
      print(": %s (value %u)", to_string(static_cast<TensorDefect>(a)), b);
      break;
    case ErrorCode::kMethodBadInstruction:
      print(": %s (instruction %u)", to_string(static_cast<InstructionDefect>(a)), b);
      break;
    case ErrorCode::kDelegateInitFailed:
      print(": %s (delegate %u)", to_string(static_cast<DelegateFault>(a)), b);
      break;
    case ErrorCode::kDelegateBadArgument:
      print(": %s (%u)", to_string(static_cast<DelegateFault>(a)), b);
      break;
    case ErrorCode::kDelegateBadPayload:
      print(": %s (0x%x)", to_string(static_cast<PayloadFault>(a)), b);
      break;
    case ErrorCode::kMethodRepeatedIo:
      print(": value %u (%s)", a, b == 0 ? "inputs" : "outputs");
      break;
    case ErrorCode::kMethodOutputWithoutMemory:
      print(": output %u (value %u)", a, b);
      break;
    case ErrorCode::kMethodWorkBudget:
      print(": instruction %u would pass the budget of %u elements", a, b);
      break;
    case ErrorCode::kInternal:
    case ErrorCode::kCop1MissingConfig:
    case ErrorCode::kCop1MissingStream:
      break;  // no values
    case ErrorCode::kCop1Truncated:
      print(": needs %u words, has %u", a, b);
      break;
    case ErrorCode::kCop1UnknownAction:
      print(": action 0x%x at word %u", b, a);
      break;
    case ErrorCode::kCop1DuplicateStream:
      print(": at word %u", a);
      break;
    case ErrorCode::kNpuNotFound:
      print(": ID=0x%08x at 0x%08x", a, b);
      break;
    case ErrorCode::kNpuTargetMismatch: {
      // The ports only when they are what differs (two Ethos-U85s with the same MACs).
      const bool ports = (a >> 28) == 2 && a >> 28 == b >> 28 && (a & 0xF) == (b & 0xF);
      print(": the delegate was compiled for ");
      print_npu(a, ports, false);
      print("; this NPU is ");
      print_npu(b, ports, true);
      break;
    }
    case ErrorCode::kNpuShramMismatch:
      print(": stream %u KiB, NPU %u KiB", a, b);
      break;
    case ErrorCode::kNpuStreamVersionMismatch:
      print(": stream version %u, NPU version %u", a, b);
      break;
    case ErrorCode::kNpuArchMismatch:
      print(": stream %u.%u, NPU %u.%u", a >> 8, a & 0xFF, b >> 8, b & 0xFF);
      break;
    case ErrorCode::kNpuFault:
    case ErrorCode::kNpuIncomplete:
    case ErrorCode::kNpuBusy:
      print(": STATUS=0x%08x (", a);
      print_status_bits(a);
      print("), QREAD=%u", b);
      break;
    case ErrorCode::kNpuTimeout:
      print(": no completion interrupt within %u ms, STATUS=0x%08x (", b, a);
      print_status_bits(a);
      print(")");
      break;
    case ErrorCode::kNpuResetFailed:
      print(": STATUS=0x%08x, PROT=0x%08x", a, b);
      break;
    case ErrorCode::kNpuStreamUnprovable:
      print(": word %u (0x%08x)", a, b);
      break;
    case ErrorCode::kNpuAccessOutside:
    case ErrorCode::kNpuAccessNoRegion:
    case ErrorCode::kNpuAccessReadOnly:
      print(": %s of the operation at word %u", to_string(static_cast<NpuAccess>(a)), b);
      break;
    default:
      print(" (a=%u, b=%u)", a, b);
  }
  print("\n");
}

}  // namespace kiln::runtime
