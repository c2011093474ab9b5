// The error model's text: the name of every error code and detail, and the one printer.
// Tables, not code: one row per code (its name and how its values print) and one list of
// names per detail enum.
#include "kiln/platform.h"
#include "kiln/runtime/error.h"

namespace kiln::runtime {

static_assert(sizeof(Error) == 12, "an Error is a code and two words");
static_assert(layer_of(ErrorCode::kTooLarge) == Layer::kGeneral &&
                  layer_of(ErrorCode::kPteTooComplex) == Layer::kLoader &&
                  layer_of(ErrorCode::kMethodWorkBudget) == Layer::kMethod &&
                  layer_of(ErrorCode::kKernelUnsupported) == Layer::kKernel &&
                  layer_of(ErrorCode::kDelegateBadArgument) == Layer::kDelegate &&
                  layer_of(ErrorCode::kNpuResetFailed) == Layer::kDriver,
              "each code lies in its layer's range");

namespace {

// --- The details' names: entry n - 1 names value n (nullptr: a retired value) ---------

constexpr const char* kHeaderFields[] = {"header length", "program_size", "segment_base_offset", "segment_data_size"};

constexpr const char* kFeatures[] = {"no execution plan",
                                     "mutable data segments",
                                     "planned buffers on another device",
                                     "tensor data outside the .pte or on another device",
                                     "a dim order other than contiguous or channels-last",
                                     "dynamic shape",
                                     "not exactly one chain",
                                     "constant_buffer and constant_segment both used",
                                     "a program input or output that is not a tensor",
                                     "a jump backwards (a loop)"};

constexpr const char* kTensorDefects[] = {
    "negative size",          "too many dimensions",        "dim_order length differs from sizes",
    "more than 4 GiB",        "constant data too small",    "both constant and planned",
    "no such planned buffer", "outside its planned buffer", "data misaligned for its element size"};

constexpr const char* kInstructionDefects[] = {"kernel call without an out tensor", nullptr,
                                               "jump condition not a bool", "move between values of different kinds",
                                               "unknown instruction kind"};

constexpr const char* kDelegateFaults[] = {"the delegate pool is full",
                                           "scratch too small",
                                           "fast scratch too small",
                                           "scratch not whole D-cache lines",
                                           "wrong argument count",
                                           "output is a constant of the program",
                                           "argument size differs from the NPU tensor's"};

constexpr const char* kPayloadFaults[] = {"payload not 16-byte aligned",
                                          "payload size not a multiple of 16",
                                          "block header cut off",
                                          "block name not NUL-padded",
                                          "block out of order or unknown",
                                          "block stored as named data (not supported)",
                                          "block header's reserved bytes not zero",
                                          "block data runs past the end of the payload",
                                          "bytes after vela_end_stream",
                                          "vela_bin_stream/vela_end_stream block not empty",
                                          "cmd_data is not a COP1 command stream",
                                          "scratch_size block is not 4 bytes",
                                          "inputs/outputs block size does not match its count",
                                          "NPU input/output count does not fit its block",
                                          "NPU tensor shape invalid",
                                          "NPU tensor element size not 1, 2 or 4",
                                          "NPU tensor not in the scratch region",
                                          "NPU tensor outside the scratch"};

constexpr const char* kNpuAccesses[] = {"IFM read",
                                        "IFM2 read",
                                        "OFM write",
                                        "weight read",
                                        "weight read (core 1)",
                                        "scale read",
                                        "scale read (core 1)",
                                        "DMA source read",
                                        "DMA destination write",
                                        "weight read (core 2)",
                                        "weight read (core 3)",
                                        "DMA index read"};

// A detail enum's names and the name of a value outside it.
struct Details {
  const char* const* names;
  uint32_t count;
  const char* unknown;
};

template <size_t N>
constexpr Details details(const char* const (&names)[N], const char* unknown) {
  return Details{names, N, unknown};
}

enum Detail : uint8_t {
  kHeaderField,
  kFeature,
  kTensorDefect,
  kInstructionDefect,
  kDelegateFault,
  kPayloadFault,
  kNpuAccess
};
constexpr Details kDetails[] = {
    details(kHeaderFields, "unknown header field"),     details(kFeatures, "unknown feature"),
    details(kTensorDefects, "unknown tensor defect"),   details(kInstructionDefects, "unknown instruction defect"),
    details(kDelegateFaults, "unknown delegate fault"), details(kPayloadFaults, "unknown payload fault"),
    details(kNpuAccesses, "unknown NPU access"),
};

const char* name_of(Detail detail, uint32_t value) {
  const Details& d = kDetails[detail];
  const char* name = value >= 1 && value <= d.count ? d.names[value - 1] : nullptr;
  return name != nullptr ? name : d.unknown;
}

// --- The codes --------------------------------------------------------------------------

// How print_error writes a code's values after its name.
enum class Values : uint8_t {
  kNumbers,     // " (a=..., b=...)"
  kNone,        // nothing
  kAB,          // `format` with a, then b
  kBA,          // `format` with b, then a
  kDetailB,     // `format` with the name of detail a (the row's `detail`), then b
  kRepeatedIo,  // a, and b as "inputs" (0) or "outputs"
  kArch,        // a and b as major << 8 | minor revisions
  kTarget,      // a and b as the NPUs two CONFIG words describe
  kStatus,      // a as a STATUS word with its bits named, then b (QREAD)
  kTimeout,     // b (the timeout), then a as a STATUS word with its bits named
  kMethod,      // a as a method's index (2^32 - 1: asked by name), then b (the method count)
};

struct CodeText {
  ErrorCode code;
  Values values;
  Detail detail;       // kDetailB rows
  const char* name;    // to_string(code)
  const char* format;  // kAB, kBA, kDetailB rows
};

constexpr CodeText kCodes[] = {
    {ErrorCode::kOk, Values::kNumbers, {}, "ok", nullptr},
    {ErrorCode::kInternal, Values::kNone, {}, "internal error: an error made from kOk", nullptr},
    {ErrorCode::kInvalidArgument, Values::kNumbers, {}, "invalid argument", nullptr},
    {ErrorCode::kMisaligned, Values::kAB, {}, "misaligned address", ": address 0x%08x, alignment %u"},
    {ErrorCode::kTooLarge, Values::kNumbers, {}, "too large", nullptr},
    {ErrorCode::kPteTooShort, Values::kNumbers, {}, "pte: file too short", nullptr},
    {ErrorCode::kPteBadIdentifier,
     Values::kAB,
     {},
     "pte: not an ExecuTorch program (identifier)",
     ": found 0x%08x, expected 0x%08x"},
    {ErrorCode::kPteBadHeader, Values::kDetailB, kHeaderField, "pte: bad extended header", ": %s %u"},
    {ErrorCode::kPteOutOfBounds, Values::kNumbers, {}, "pte: offset or size out of bounds", nullptr},
    {ErrorCode::kPteBadTable, Values::kNumbers, {}, "pte: malformed table", nullptr},
    {ErrorCode::kPteMisaligned, Values::kNumbers, {}, "pte: misaligned vector", nullptr},
    {ErrorCode::kPteBadString, Values::kNumbers, {}, "pte: string not NUL-terminated", nullptr},
    {ErrorCode::kPteBadUnion, Values::kNumbers, {}, "pte: unknown union type", nullptr},
    {ErrorCode::kPteBadEnum, Values::kNumbers, {}, "pte: enum value out of range", nullptr},
    {ErrorCode::kPteBadIndex, Values::kNumbers, {}, "pte: index out of range", nullptr},
    {ErrorCode::kPteBadTensor, Values::kDetailB, kTensorDefect, "pte: malformed tensor", ": %s (value %u)"},
    {ErrorCode::kPteMissingField, Values::kNumbers, {}, "pte: required field missing", nullptr},
    {ErrorCode::kPteUnsupported, Values::kDetailB, kFeature, "pte: unsupported feature", ": %s (%u)"},
    {ErrorCode::kPteTooComplex, Values::kNumbers, {}, "pte: overlapping tables beyond any valid file", nullptr},
    {ErrorCode::kPteStateSize,
     Values::kAB,
     {},
     "pte: plans declare state arenas of different sizes",
     ": plan %u declares %u bytes of memory id 2, an earlier plan another size"},
    {ErrorCode::kMethodStorageTooSmall,
     Values::kNumbers,
     {},
     "method: value/kernel/delegate storage too small",
     nullptr},
    {ErrorCode::kMethodBufferMissing,
     Values::kAB,
     {},
     "method: planned buffer not supplied",
     ": memory id %u (%u buffers supplied)"},
    {ErrorCode::kMethodBufferTooSmall,
     Values::kAB,
     {},
     "method: planned buffer too small",
     ": memory id %u needs %u bytes"},
    {ErrorCode::kMethodMissingKernel, Values::kNumbers, {}, "method: no kernel for operator", nullptr},
    {ErrorCode::kMethodMissingBackend, Values::kNumbers, {}, "method: no backend for delegate", nullptr},
    {ErrorCode::kMethodBadValue, Values::kNumbers, {}, "method: value of the wrong kind", nullptr},
    {ErrorCode::kMethodBadInstruction, Values::kDetailB, kInstructionDefect, "method: bad instruction",
     ": %s (instruction %u)"},
    {ErrorCode::kMethodNoData, Values::kNumbers, {}, "method: tensor has no data", nullptr},
    {ErrorCode::kMethodBadInput, Values::kNumbers, {}, "method: bad input", nullptr},
    {ErrorCode::kMethodRepeatedIo,
     Values::kRepeatedIo,
     {},
     "method: a value listed twice as a program input or output",
     nullptr},
    {ErrorCode::kMethodOutputWithoutMemory,
     Values::kAB,
     {},
     "method: program output without memory",
     ": output %u (value %u)"},
    {ErrorCode::kMethodWorkBudget,
     Values::kAB,
     {},
     "method: work budget exhausted",
     ": instruction %u would pass the budget of %u elements"},
    {ErrorCode::kMethodNotFound, Values::kMethod, {}, "method: no such method", nullptr},
    {ErrorCode::kKernelBadArgument, Values::kNumbers, {}, "kernel: bad argument", nullptr},
    {ErrorCode::kKernelShapeMismatch, Values::kNumbers, {}, "kernel: shape mismatch", nullptr},
    {ErrorCode::kKernelUnsupported, Values::kNumbers, {}, "kernel: unsupported arguments", nullptr},
    {ErrorCode::kDelegateInitFailed, Values::kDetailB, kDelegateFault, "delegate: init failed", ": %s (delegate %u)"},
    {ErrorCode::kDelegateBadPayload, Values::kDetailB, kPayloadFault, "delegate: bad payload", ": %s (0x%x)"},
    {ErrorCode::kDelegateBadArgument, Values::kDetailB, kDelegateFault, "delegate: bad argument", ": %s (%u)"},
    {ErrorCode::kCop1BadMagic, Values::kAB, {}, "not a COP1 payload", ": found 0x%08x, expected 0x%08x"},
    {ErrorCode::kCop1Truncated, Values::kAB, {}, "COP1 payload truncated", ": needs %u words, has %u"},
    {ErrorCode::kCop1UnknownAction,
     Values::kBA,
     {},
     "COP1 payload has an unknown driver action",
     ": action 0x%x at word %u"},
    {ErrorCode::kCop1MissingConfig, Values::kNone, {}, "COP1 payload has no NPU configuration", nullptr},
    {ErrorCode::kCop1MissingStream, Values::kNone, {}, "COP1 payload has no command stream", nullptr},
    {ErrorCode::kCop1DuplicateStream, Values::kAB, {}, "COP1 payload has two command streams", ": at word %u"},
    {ErrorCode::kNpuNotFound, Values::kAB, {}, "no Ethos-U NPU at this address", ": ID=0x%08x at 0x%08x"},
    {ErrorCode::kNpuTargetMismatch, Values::kTarget, {}, "stream compiled for another NPU", nullptr},
    {ErrorCode::kNpuShramMismatch,
     Values::kAB,
     {},
     "stream compiled for another SHRAM size",
     ": stream %u KiB, NPU %u KiB"},
    {ErrorCode::kNpuStreamVersionMismatch,
     Values::kAB,
     {},
     "stream compiled for another command stream version",
     ": stream version %u, NPU version %u"},
    {ErrorCode::kNpuArchMismatch, Values::kArch, {}, "stream compiled for another NPU architecture", nullptr},
    {ErrorCode::kNpuBusy, Values::kStatus, {}, "NPU busy", nullptr},
    {ErrorCode::kNpuFault, Values::kStatus, {}, "NPU fault", nullptr},
    {ErrorCode::kNpuIncomplete, Values::kStatus, {}, "NPU stopped before the end of the stream", nullptr},
    {ErrorCode::kNpuTimeout, Values::kTimeout, {}, "NPU timeout", nullptr},
    {ErrorCode::kNpuResetFailed, Values::kAB, {}, "NPU reset failed", ": STATUS=0x%08x, PROT=0x%08x"},
    {ErrorCode::kNpuStreamUnprovable,
     Values::kAB,
     {},
     "NPU stream has a command the bounds check cannot follow",
     ": word %u (0x%08x)"},
    {ErrorCode::kNpuAccessOutside, Values::kDetailB, kNpuAccess,
     "NPU stream accesses memory outside its region's buffer", ": %s of the operation at word %u"},
    {ErrorCode::kNpuAccessNoRegion, Values::kDetailB, kNpuAccess, "NPU stream accesses a region with no buffer",
     ": %s of the operation at word %u"},
    {ErrorCode::kNpuAccessReadOnly, Values::kDetailB, kNpuAccess, "NPU stream writes the read-only weights region",
     ": %s of the operation at word %u"},
};

// The row of `code`; nullptr for a value that is not an ErrorCode.
const CodeText* row_of(ErrorCode code) {
  for (const CodeText& row : kCodes) {
    if (row.code == code) return &row;
  }
  return nullptr;
}

// The Ethos-U STATUS register's bits 0..9: bit 7 is the U55/U65's (reserved on the U85),
// bit 9 the U85's (reserved on the U55/U65), so one list names every family's bits.
const char* const kStatusBitNames[] = {
    "running",         "irq_raised",     "bus_status", "reset_status", "cmd_parse_error",
    "cmd_end_reached", "pmu_irq_raised", "wd_fault",   "ecc_fault",    "branch_fault",
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

const char* to_string(ErrorCode code) {
  const CodeText* row = row_of(code);
  return row != nullptr ? row->name : "unknown error";
}

const char* to_string(HeaderField field) { return name_of(kHeaderField, static_cast<uint32_t>(field)); }
const char* to_string(Feature feature) { return name_of(kFeature, static_cast<uint32_t>(feature)); }
const char* to_string(TensorDefect defect) { return name_of(kTensorDefect, static_cast<uint32_t>(defect)); }
const char* to_string(InstructionDefect defect) { return name_of(kInstructionDefect, static_cast<uint32_t>(defect)); }
const char* to_string(DelegateFault fault) { return name_of(kDelegateFault, static_cast<uint32_t>(fault)); }
const char* to_string(PayloadFault fault) { return name_of(kPayloadFault, static_cast<uint32_t>(fault)); }
const char* to_string(NpuAccess access) { return name_of(kNpuAccess, static_cast<uint32_t>(access)); }

void print_error(const Error& error) {
  const CodeText* row = row_of(error.code);
  const unsigned a = error.a, b = error.b;
  print("%s", row != nullptr ? row->name : "unknown error");
  switch (row != nullptr ? row->values : Values::kNumbers) {
    case Values::kNumbers: print(" (a=%u, b=%u)", a, b); break;
    case Values::kNone: break;
    case Values::kAB: print(row->format, a, b); break;
    case Values::kBA: print(row->format, b, a); break;
    case Values::kDetailB: print(row->format, name_of(row->detail, a), b); break;
    case Values::kMethod:
      a == UINT32_MAX ? print(": none of that name among %u", b) : print(": index %u of %u", a, b);
      break;
    case Values::kRepeatedIo: print(": value %u (%s)", a, b == 0 ? "inputs" : "outputs"); break;
    case Values::kArch: print(": stream %u.%u, NPU %u.%u", a >> 8, a & 0xFF, b >> 8, b & 0xFF); break;
    case Values::kTarget: {
      // The ports only when they are what differs (two Ethos-U85s with the same MACs).
      const bool ports = (a >> 28) == 2 && a >> 28 == b >> 28 && (a & 0xF) == (b & 0xF);
      print(": the delegate was compiled for ");
      print_npu(a, ports, false);
      print("; this NPU is ");
      print_npu(b, ports, true);
      break;
    }
    case Values::kStatus:
      print(": STATUS=0x%08x (", a);
      print_status_bits(a);
      print("), QREAD=%u", b);
      break;
    case Values::kTimeout:
      print(": no completion interrupt within %u ms, STATUS=0x%08x (", b, a);
      print_status_bits(a);
      print(")");
      break;
  }
  print("\n");
}

}  // namespace kiln::runtime
