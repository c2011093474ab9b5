// A Method: a verified Program's plan bound to memory, kernels and backends.
//
// Memory (no heap; all supplied by the app and borrowed for the Method's lifetime):
//  - planned[k] is the buffer for memory id k + 1, at least planned_buffer_size(k + 1)
//    bytes, aligned to 16 bytes (tensors sit at the offsets the .pte gives);
//  - values: at least program.value_count() entries (one per EValue);
//  - kernels: at least program.operator_count() entries (the kernel per operator);
//  - delegates: at least program.delegate_count() entries (backend and handle each).
// A build step sizes these from the .pte (kiln.pte.schema gives the counts).
// Method::create binds every value (planned tensors at their offsets, constants,
// ints/doubles/bools/lists, null), checks every index and offset against the program
// and the buffers, finds a kernel for every operator and a backend for every delegate
// (initialising each delegate once). Error codes: kMethod* (kiln/runtime/error.h),
// kMisaligned (a = buffer address, b = 16), and whatever a backend's init returns.
//
// Inputs are consumed by execute(): a program input that only the chain's first
// instruction reads, once, a DelegateCall whose backend offers an input_place for it,
// is bound at create where that backend reads it (e.g. inside the Ethos-U scratch), so
// the app's write is the only copy; the run may overwrite it. (Not so an input that is
// also a program output or in a tensor list, nor any input of a chain with a move, jump
// or free instruction: those stay in planned memory and are copied.) So set every
// input (write its bytes through input(i)->data, or set_input) before each execute(),
// and read none back after it.
//
// execute() runs the chain: KernelCall, DelegateCall, MoveCall, JumpFalseCall,
// FreeCall; a malformed one fails with kMethodBadInstruction (a = InstructionDefect,
// b = the instruction's index). A jump-back loop is bounded by kMaxSteps instructions
// (kMethodStepLimit); a kernel's or backend's error is returned as it is.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/result.h"
#include "kiln/runtime/backend.h"
#include "kiln/runtime/kernel.h"
#include "kiln/runtime/program.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime {

constexpr uint32_t kMaxSteps = 1u << 20;

struct DelegateSlot {
  const Backend* backend;
  void* handle;  // what the backend's init returned
};

struct MethodMemory {
  Span<Span<uint8_t>> planned;
  Span<Value> values;
  Span<KernelFn> kernels;
  Span<DelegateSlot> delegates;
};

class Method {
 public:
  Method() = default;

  static Result<Method> create(const Program& program, const MethodMemory& memory,
                               const KernelTable& kernels, const BackendTable& backends);

  Status execute();

  size_t input_count() const;
  size_t output_count() const;
  // Input/output tensors (nullptr for an index out of range). An input's bytes are
  // written before each execute() (they are consumed: see above); outputs are read after it.
  Tensor* input(size_t i) const;
  const Tensor* output(size_t i) const;
  // Points input i (a tensor without planned memory, or any input) at `data`, which
  // must hold exactly the tensor's nbytes and outlive the Method's use.
  Status set_input(size_t i, void* data, size_t nbytes);

  const Program& program() const { return program_; }

 private:
  Status bind_values(const MethodMemory& memory);
  Status bind_delegates(const BackendTable& backends);
  void place_inputs();
  Status run_instruction(uint32_t index, uint32_t* next);
  Status call_kernel(const void* table, uint32_t index);
  Status call_delegate(const void* table);

  Program program_;
  uint32_t instructions_ = 0;  // offset of the chain's instruction vector in the .pte
  uint32_t instruction_count_ = 0;
  Value* values_ = nullptr;      // program_.value_count() entries
  KernelFn* kernels_ = nullptr;  // per operator
  DelegateSlot* delegates_ = nullptr;
};

}  // namespace kiln::runtime
