// A Method: one method (execution plan) of a verified Program bound to memory, kernels and
// backends. Method::create binds the plan the Program handle reads (plan 0 for the handle
// Program::load returns), or the method given by index or name (Program::method).
//
// Memory (no heap; all supplied by the app and borrowed for the Method's lifetime):
//  - planned[k] is the buffer for memory id k + 1, at least planned_buffer_size(k + 1)
//    bytes, aligned to 16 bytes (tensors sit at the offsets the .pte gives). A method whose
//    plan lists more ids than planned.size fails with kMethodBufferMissing (a = the first id
//    missing), one given a smaller buffer with kMethodBufferTooSmall; ids past the plan's are
//    not read. Methods of one program may be given the same buffers: memory id 1 (the
//    activations) when they never run at the same time (one method's execute() returns before
//    another's starts, and the app reads an output before running another method), and
//    memory id kStateMemoryId (2), the program's state arena (kiln/runtime/program.h), always:
//    every method must be given the one arena, which the app zeroes before the first
//    execute() of any of them, and leaves to the methods from then on;
//  - values: at least program.value_count() entries (one per EValue);
//  - kernels: at least program.operator_count() entries (the kernel per operator);
//  - delegates: at least program.delegate_count() entries (backend and handle each).
// A build step sizes these from the .pte (kiln.pte.reader gives the counts).
// Method::create binds every value (planned tensors at their offsets, constants,
// ints/doubles/bools/lists, null), checks every index and offset against the program
// and the buffers, finds a kernel for every operator and a backend for every delegate
// (initialising each delegate once). It refuses a value listed twice among the program's
// inputs or twice among its outputs (kMethodRepeatedIo) and an output with neither planned
// memory nor constant data (kMethodOutputWithoutMemory), so every output() of a created
// Method has data (or no bytes). Error codes: kMethod* (kiln/runtime/error.h), kMisaligned
// (a = buffer address, b = 16), and whatever a backend's init returns.
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
// b = the instruction's index); a kernel's or backend's error is returned as it is. Jumps
// go forward only (Program::load refuses a loop), so a run executes each instruction at
// most once, and the work budget (set_work_budget) bounds what those instructions do.
//
// Bounds on each call (n = the .pte's size in bytes; "elements" as set_work_budget says):
//  - Method::create: O(n) reads of the .pte and writes of the values (one pass over the
//    values, one over the instructions, one over the inputs and outputs; the loader's
//    work budget, 8 n + 4096 reads, bounds every pass that follows shared tables), plus
//    each backend's init once per delegate (Ethos-U: its payload's checks) and one kernel
//    table lookup per operator (O(table size) each).
//  - execute(): at most instruction_count() instructions and at most the work budget in
//    elements; each kernel's own work per element is bounded by its arguments (the
//    window of a pool, the reduction length of a matmul or convolution, the sorted
//    dim's length for sort and topk), and a DelegateCall's NPU run by the driver's timeout.
//  - input_count, output_count, input, output, set_input, set_work_budget: O(1) (input
//    and output read one entry of the .pte's index vectors).
// Measured with kiln's instruction counter on the virtual platform (Cortex-M55, the
// executor runner's Release build): Method::create takes 19,508 instructions for tiny_cnn
// --io int8 (13,656 bytes, the Ethos-U init's stream checks included) and 41,771 for
// ExecuTorch's conv+relu CPU program (3,984 bytes), 4,253,564 (9.8 a byte) for a
// 432,592-byte program of 12,000 Int values and an IntList of them; a 51,904-byte tiny_cnn
// listing its input and output 1,000 times each is refused after 15,307. execute() takes
// 1,512 for one fully delegated tiny_cnn inference (the budget's charge about 100 of them)
// and 170,701 for the conv+relu program.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/backend.h"
#include "kiln/runtime/kernel.h"
#include "kiln/runtime/program.h"
#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime {

// A work budget that never runs out (the default of a created Method).
constexpr uint64_t kUnlimitedWork = UINT64_MAX;
// The executor runner's work budget per execute(), in elements: kRunnerWorkMargin x the
// Method's work_per_run() (saturated at kUnlimitedWork). A run needs at most
// work_per_run(), so only a defect (or a move that grows a tensor) could reach it.
constexpr uint64_t kRunnerWorkMargin = 4;
constexpr uint64_t runner_work_budget(uint64_t work_per_run) {
  return work_per_run > kUnlimitedWork / kRunnerWorkMargin ? kUnlimitedWork : kRunnerWorkMargin * work_per_run;
}

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

  static Result<Method> create(const Program& program, const MethodMemory& memory, const KernelTable& kernels,
                               const BackendTable& backends);
  // Method `index` or the method named `name` of `program` (kMethodNotFound when it has none).
  static Result<Method> create(const Program& program, size_t index, const MethodMemory& memory,
                               const KernelTable& kernels, const BackendTable& backends);
  static Result<Method> create(const Program& program, StringView name, const MethodMemory& memory,
                               const KernelTable& kernels, const BackendTable& backends);

  // Runs the chain once; fails with kMethodWorkBudget (a = instruction index, b = the
  // budget) before the instruction that would take the run past the work budget.
  Status execute();

  // The work budget of each execute(), in elements: every instruction charges, before it
  // runs, 1, plus the element count (numel) of each tensor it names as an argument, plus
  // the item count of each TensorList argument: what its kernel reads and writes, or what
  // a delegate copies and keeps coherent in the caches. Default kUnlimitedWork. A
  // watchdog on the CPU path: set it from work_per_run() (e.g. a multiple of it).
  void set_work_budget(uint64_t elements) { budget_ = elements; }
  uint64_t work_budget() const { return budget_; }
  // What one execute() charges when it runs every instruction, as bound at create (a run
  // that skips instructions by a jump charges less).
  uint64_t work_per_run() const { return work_per_run_; }

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
  Status survey();
  Status bind_values(const MethodMemory& memory);
  Status bind_delegates(const BackendTable& backends);
  void place_input(Tensor& t, uint32_t arg);
  Status check_outputs() const;
  uint64_t charge(const void* arguments) const;
  Status run_instruction(const void* instruction, const void* arguments, uint32_t index, uint32_t* next);
  Status call_kernel(const void* table, const void* arguments, uint32_t index);
  Status call_delegate(const void* table, const void* arguments);

  Program program_;
  uint32_t instructions_ = 0;  // offset of the chain's instruction vector in the .pte
  uint32_t instruction_count_ = 0;
  Value* values_ = nullptr;      // program_.value_count() entries
  KernelFn* kernels_ = nullptr;  // per operator
  DelegateSlot* delegates_ = nullptr;
  const DelegateSlot* placer_ = nullptr;  // the first instruction's backend, when it places inputs
  uint64_t budget_ = kUnlimitedWork;
  uint64_t work_per_run_ = 0;
};

}  // namespace kiln::runtime
