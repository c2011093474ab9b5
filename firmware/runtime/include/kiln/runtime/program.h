// A loaded .pte: ExecuTorch's program format (FlatBuffer "ET12", optional "eh00"
// extended header, segments), read in place. Program::load verifies every table,
// vector, string, union, enum and cross-reference once; the accessors below then
// read verified data and cannot overrun.
//
// Methods: each execution plan of the file is a method, known by its name (kiln's
// single-method programs and ExecuTorch's Arm flow write one, "forward"; a language model
// has "prefill" and "decode"). A Program handle reads one of them, its plan: load returns
// the handle on plan 0, method(i) the handle on plan i. The plan accessors (inputs,
// outputs, planned buffers, operators, delegates, instructions, states) read that plan.
//
// State: the methods of a program may share state, tensors that keep their values from one
// execute() to the next and from one method to another (a language model's KV cache). They
// follow ExecuTorch's share_mutable_buffers convention: every state tensor is planned in
// memory id kStateMemoryId (2), the state arena, at the same offset in every plan that uses
// it, without constant data, its extra_tensor_info naming it (fully_qualified_name); every
// plan's planned buffers are [0, its activations, the arena]. The loader checks that every
// plan declaring memory id 2 declares the same size (else kPteStateSize) and that every
// tensor planned there lies inside it (kPteBadTensor, TensorDefect::kOutsideBuffer); which
// tensor is which across plans (same name, same offset) is the compiler's promise. The
// application supplies one buffer of that size as memory id 2 to every Method it creates from
// the program (kiln/runtime/method.h) and zeroes it before the first execute(): the .pte
// holds no initial state (a program with mutable data segments is refused).
//
// Ownership: a Program is a small handle (copyable) that points into the .pte
// bytes; those must stay valid and unchanged while the Program, or any Method,
// view or tensor made from it, is used. Alignment: the bytes must start at a
// 16-byte aligned address (vectors of int64/double are read in place).
//
// Errors returned by load (kiln/runtime/error.h): kMisaligned (a = the address,
// b = 16), kTooLarge (a file of 4 GiB or more) and the loader's kPte* codes, with
// their details (HeaderField, Feature, TensorDefect) as error.h describes them. Among
// the features refused: a JumpFalseCall to itself or an earlier instruction (a loop;
// neither kiln nor ExecuTorch's Arm flow writes one), so a Method runs each instruction
// at most once per execute(); a plan of not exactly one chain; extra tensor info of data
// outside the .pte (location EXTERNAL) or on a device other than the CPU.
//
// Bounds (n = the file's size in bytes): load does O(n) work: its verification pass
// spends a budget of 8 n + 4096 FlatBuffer reads (shared tables are read again each
// time they are referenced) and fails with kPteTooComplex beyond it. Each accessor
// below is O(1) except tensor sizes (O(dims), at most kMaxDims), find_named_data
// (O(named_data_count())), CompileSpecs::find (O(its specs)), method_index (O(the methods'
// name bytes)), method (O(its inputs and outputs)) and state_count and state (O(value_count())). Measured with kiln's
// instruction counter on the virtual platform (Cortex-M55, Release): load takes 9,843,422
// instructions (23 a byte) for a 432,592-byte program of 12,000 Int values and an IntList
// of them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime {

enum class DataLocation : uint8_t { kInline = 0, kSegment = 1 };

struct TensorInfo {
  ScalarType type;
  Span<const int32_t> sizes;  // into the .pte
  size_t nbytes;
  uint32_t value_index;       // into the plan's values
  size_t numel;               // elements: the product of sizes
  DimOrder order;             // how its elements lie in memory
};

struct OperatorInfo {
  StringView name;      // e.g. "cortex_m::quantize_per_tensor"
  StringView overload;  // e.g. "out"; empty when absent
};

struct CompileSpec {
  StringView key;
  Span<const uint8_t> value;
};

// A delegate's compile specs, read on demand from the verified .pte.
class CompileSpecs {
 public:
  size_t size() const { return count_; }
  CompileSpec operator[](size_t i) const;  // i < size()
  // The value of `key`; empty if there is none.
  Span<const uint8_t> find(StringView key) const;

 private:
  friend class Program;
  const uint8_t* base_ = nullptr;
  uint32_t vector_ = 0;  // offset of the vector of spec tables
  uint32_t count_ = 0;
  uint32_t limit_ = 0;   // bytes of the FlatBuffer part
};

struct DelegateInfo {
  StringView id;                  // e.g. "EthosUBackend"
  Span<const uint8_t> payload;    // inline data or a segment, inside the .pte
  CompileSpecs compile_specs;
};

struct NamedData {
  StringView key;
  Span<const uint8_t> data;  // a segment inside the .pte
};

// The memory id of the program's state arena (see the header comment).
constexpr uint32_t kStateMemoryId = 2;

// A tensor of the state arena, as a plan lists it.
struct StateTensor {
  StringView name;    // extra_tensor_info.fully_qualified_name (empty when absent)
  uint64_t offset;    // bytes from the start of the state arena
  TensorInfo tensor;  // its type, sizes and bytes (lying inside the arena: verified)
};

class Program {
 public:
  Program() = default;

  // Verifies `size` bytes at `pte` (see the header comment for errors).
  static Result<Program> load(const void* pte, size_t size);

  // The program's methods (execution plans): their count, the name of method i (empty for
  // i >= method_count()), the index of the method named `name` (kMethodNotFound, a = 2^32 - 1,
  // b = method_count(), when there is none), and the handle on method i, whose plan accessors
  // read plan i (kMethodNotFound, a = i, b = method_count(), for i >= method_count()).
  // A method whose inputs or outputs are not all tensors has no handle (kPteUnsupported,
  // Feature::kNonTensorIo, b = the position): load checks plan 0's, method(i) the others'.
  size_t method_count() const;
  StringView method_name(size_t i) const;
  Result<size_t> method_index(StringView name) const;
  Result<Program> method(size_t i) const;
  // The number a constant method returns (ExecuTorch's LLM export writes them, e.g.
  // "get_max_seq_len": a plan without inputs whose one output is an Int value): kMethodNotFound
  // when there is none of that name, kMethodBadValue (a = its output's value index, 2^32 - 1 when
  // it has not exactly one; b = that value's kind) when it is not one.
  Result<int64_t> constant_method(StringView name) const;

  // --- The plan's (method's) ---
  uint32_t value_count() const { return value_count_; }
  size_t input_count() const;
  size_t output_count() const;
  TensorInfo input(size_t i) const;   // i < input_count(); inputs are tensors (verified)
  TensorInfo output(size_t i) const;  // i < output_count()

  // Planned buffers: memory ids 1..planned_buffer_count() (id 0 is reserved; id
  // kStateMemoryId is the program's state arena).
  size_t planned_buffer_count() const;
  uint64_t planned_buffer_size(uint32_t memory_id) const;  // 0 for an id out of range

  // The plan's tensors planned in the state arena, in value order: their count and the i-th
  // (i < state_count(); else an empty one).
  size_t state_count() const;
  StateTensor state(size_t i) const;

  size_t operator_count() const;
  OperatorInfo op(size_t i) const;  // i < operator_count()

  size_t delegate_count() const;
  DelegateInfo delegate(size_t i) const;  // i < delegate_count()

  size_t named_data_count() const;
  NamedData named_data(size_t i) const;  // i < named_data_count()
  // The data stored under `key`; empty (data == nullptr) if there is none.
  Span<const uint8_t> find_named_data(StringView key) const;

  // Constant `index` (a tensor's data_buffer_idx, 1-based; 0 is the reserved empty
  // one) up to the next constant; empty if out of range.
  Span<const uint8_t> constant(uint32_t index) const;

  // The instructions' count in the plan's (single) chain.
  size_t instruction_count() const;

  // The raw bytes and table offsets, for the Method (internal use).
  const uint8_t* bytes() const { return base_; }
  uint32_t flatbuffer_size() const { return program_size_; }
  uint32_t plan_offset() const { return plan_; }
  uint32_t chain_offset() const { return chain_; }

 private:
  friend struct ProgramLoader;  // the verification pass (program.cpp)
  Span<const uint8_t> segment(uint32_t index) const;

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;            // whole file
  uint32_t program_size_ = 0;  // the FlatBuffer part
  uint32_t root_ = 0;          // Program table
  uint32_t plan_ = 0;          // the ExecutionPlan table this handle reads
  uint32_t chain_ = 0;         // its Chain table
  uint32_t value_count_ = 0;   // its values
  size_t segment_base_ = 0;    // file offset segment offsets count from
  size_t segment_end_ = 0;
};

}  // namespace kiln::runtime
