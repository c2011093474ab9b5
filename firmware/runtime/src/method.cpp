// Method: binds a verified plan to memory, kernels and backends, and runs its chain.
#include "kiln/runtime/method.h"

#include <cstring>

#include "fb.h"
#include "kiln/runtime/try.h"
#include "schema.h"

namespace kiln::runtime {

namespace {

constexpr uintptr_t kBufferAlignment = 16;

Error bad_instruction(InstructionDefect defect, uint32_t index) {
  return Error{ErrorCode::kMethodBadInstruction, static_cast<uint32_t>(defect), index};
}

Error bad_value(uint32_t index, ValueKind kind) {
  return Error{ErrorCode::kMethodBadValue, index, static_cast<uint32_t>(kind)};
}

bool is_tensor_list(uint8_t kind) {
  return kind == static_cast<uint8_t>(ValueKind::kTensorList) ||
         kind == static_cast<uint8_t>(ValueKind::kOptionalTensorList);
}

// What Method::survey learns about a value before it is bound, kept in the value's own
// storage entry (Value::i, packed) until bind_values binds that value.
struct Survey {
  uint32_t arg = 0;    // its argument position in instruction 0 (when uses == 1)
  uint32_t uses = 0;   // 0: none; 1: read once, by instruction 0; 2: more, or elsewhere
  bool input = false;  // listed among the program's inputs
  bool output = false; // listed among the program's outputs

  static Survey of(int64_t packed) {
    const auto bits = static_cast<uint64_t>(packed);
    Survey s;
    s.arg = static_cast<uint32_t>(bits);
    s.uses = static_cast<uint32_t>(bits >> 32) & 3u;
    s.input = (bits >> 34) & 1u;
    s.output = (bits >> 35) & 1u;
    return s;
  }
  int64_t packed() const {
    return static_cast<int64_t>(uint64_t{arg} | uint64_t{uses} << 32 | uint64_t{input} << 34 | uint64_t{output} << 35);
  }
  void use(uint32_t count, uint32_t position) {
    uses = uses + count > 2 ? 2 : uses + count;
    arg = position;
  }
};

// The argument vector of a kernel or delegate call (slot 1 of both); empty for the others.
fb::Vector call_args(const fb::Verified& v, const fb::Union& u) {
  if (u.type != schema::kKernelCall && u.type != schema::kDelegateCall) return {};
  return v.vector(u.value, 1, 4);
}

constexpr uint32_t saturate(uint64_t n) { return n > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(n); }

}  // namespace

Result<Method> Method::create(const Program& program, const MethodMemory& memory, const KernelTable& kernels,
                              const BackendTable& backends) {
  Method m;
  m.program_ = program;
  if (memory.values.size < program.value_count()) {
    return Error{ErrorCode::kMethodStorageTooSmall, program.value_count(), static_cast<uint32_t>(memory.values.size)};
  }
  if (memory.kernels.size < program.operator_count()) {
    return Error{ErrorCode::kMethodStorageTooSmall, static_cast<uint32_t>(program.operator_count()),
                 static_cast<uint32_t>(memory.kernels.size)};
  }
  if (memory.delegates.size < program.delegate_count()) {
    return Error{ErrorCode::kMethodStorageTooSmall, static_cast<uint32_t>(program.delegate_count()),
                 static_cast<uint32_t>(memory.delegates.size)};
  }
  m.values_ = memory.values.data;
  m.kernels_ = memory.kernels.data;
  m.delegates_ = memory.delegates.data;
  fb::Verified v(program);
  fb::Table chain = v.table(program.chain_offset());
  fb::Vector instructions = v.vector(chain, schema::kInstructions, 4);
  m.instructions_ = instructions.start;
  m.instruction_count_ = instructions.count;
  for (size_t i = 0; i < program.operator_count(); ++i) {
    OperatorInfo op = program.op(i);
    m.kernels_[i] = kernels.find(op.name, op.overload);
    if (m.kernels_[i] == nullptr) return Error{ErrorCode::kMethodMissingKernel, static_cast<uint32_t>(i), 0};
  }
  KILN_CHECK(m.bind_delegates(backends));
  KILN_CHECK(m.survey());
  KILN_CHECK(m.bind_values(memory));
  KILN_CHECK(m.check_outputs());
  for (uint32_t k = 0; k < m.instruction_count_; ++k) {
    const fb::Vector args = call_args(v, v.union_at(v.element(instructions, k)));
    m.work_per_run_ += m.charge(&args);
  }
  return m;
}

Result<Method> Method::create(const Program& program, size_t index, const MethodMemory& memory,
                              const KernelTable& kernels, const BackendTable& backends) {
  KILN_TRY(const Program plan, program.method(index));
  return create(plan, memory, kernels, backends);
}

Result<Method> Method::create(const Program& program, StringView name, const MethodMemory& memory,
                              const KernelTable& kernels, const BackendTable& backends) {
  KILN_TRY(const size_t index, program.method_index(name));
  return create(program, index, memory, kernels, backends);
}

// One pass over the program's inputs and outputs, its instructions' arguments and its
// tensor lists, before binding (the value storage holds a Survey per value meanwhile):
// refuses a value listed twice as an input or twice as an output, and counts each value's
// uses when the chain's inputs can be placed. They can when instruction 0 is a
// DelegateCall whose backend offers input_place and every instruction is a kernel or
// delegate call (a jump could run instruction 0 again after its inputs were consumed; a
// move or free could change them). bind_values then binds a program input where that
// backend reads it when only instruction 0 reads it, once, and it is neither an output,
// nor an item of a tensor list, nor a constant.
Status Method::survey() {
  fb::Verified v(program_);
  for (uint32_t i = 0; i < program_.value_count(); ++i) values_[i] = Value{};
  const fb::Table plan = v.table(program_.plan_offset());
  for (int pass = 0; pass < 2; ++pass) {
    const bool outputs = pass == 1;
    const fb::Vector io = v.vector(plan, outputs ? schema::kOutputs : schema::kInputs, 4);
    for (uint32_t k = 0; k < io.count; ++k) {
      const uint32_t index = v.at<uint32_t>(io.start + 4 * k);  // a tensor value (verified)
      Survey s = Survey::of(values_[index].i);
      bool& listed = outputs ? s.output : s.input;
      if (listed) return Error{ErrorCode::kMethodRepeatedIo, index, outputs ? 1u : 0u};
      listed = true;
      values_[index].i = s.packed();
    }
  }
  if (instruction_count_ == 0) return {};
  const fb::Vector chain{instructions_, instruction_count_};
  const fb::Union first = v.union_at(v.element(chain, 0));
  if (first.type != schema::kDelegateCall) return {};
  const DelegateSlot* slot = &delegates_[v.scalar<int32_t>(first.value, 0)];
  if (slot->backend->input_place == nullptr) return {};
  for (uint32_t k = 0; k < instruction_count_; ++k) {
    const fb::Union u = v.union_at(v.element(chain, k));
    if (u.type != schema::kKernelCall && u.type != schema::kDelegateCall) return {};
    const fb::Vector args = v.vector(u.value, 1, 4);
    for (uint32_t j = 0; j < args.count; ++j) {
      Value& value = values_[v.at<int32_t>(args.start + 4 * j)];
      Survey s = Survey::of(value.i);
      s.use(k == 0 ? 1 : 2, j);
      value.i = s.packed();
    }
  }
  const fb::Vector values = v.vector(plan, schema::kValues, 4);
  for (uint32_t n = 0; n < values.count; ++n) {
    const fb::Union u = v.union_at(v.element(values, n));
    if (!is_tensor_list(u.type)) continue;
    const fb::Vector items = v.vector(u.value, 0, 4);
    for (uint32_t j = 0; j < items.count; ++j) {
      const int32_t item = v.at<int32_t>(items.start + 4 * j);
      if (item < 0) continue;  // None in an optional list
      Survey s = Survey::of(values_[item].i);
      s.use(2, 0);
      values_[item].i = s.packed();
    }
  }
  placer_ = slot;
  return {};
}

Status Method::bind_values(const MethodMemory& memory) {
  size_t n_buffers = program_.planned_buffer_count();
  if (memory.planned.size < n_buffers) {
    return Error{ErrorCode::kMethodBufferMissing, static_cast<uint32_t>(memory.planned.size + 1),
                 static_cast<uint32_t>(memory.planned.size)};
  }
  for (size_t k = 0; k < n_buffers; ++k) {
    const Span<uint8_t>& buffer = memory.planned[k];
    uint64_t need = program_.planned_buffer_size(static_cast<uint32_t>(k + 1));
    if (buffer.size < need || (need != 0 && buffer.data == nullptr)) {
      return Error{ErrorCode::kMethodBufferTooSmall, static_cast<uint32_t>(k + 1), static_cast<uint32_t>(need)};
    }
    auto address = reinterpret_cast<uintptr_t>(buffer.data);
    if (address % kBufferAlignment != 0) {
      return Error{ErrorCode::kMisaligned, static_cast<uint32_t>(address), kBufferAlignment};
    }
  }
  fb::Verified v(program_);
  fb::Vector values = v.vector(v.table(program_.plan_offset()), schema::kValues, 4);
  for (uint32_t i = 0; i < values.count; ++i) {
    fb::Union u = v.union_at(v.element(values, i));
    Value& value = values_[i];
    const Survey survey = Survey::of(value.i);
    value = Value{};
    value.kind = static_cast<ValueKind>(u.type);
    switch (value.kind) {
      case ValueKind::kInt: value.i = v.scalar<int64_t>(u.value, 0); break;
      case ValueKind::kBool: value.b = v.scalar<uint8_t>(u.value, 0) != 0; break;
      case ValueKind::kDouble: {  // its 64 bits, as the Int's: one read for both
        const int64_t bits = v.scalar<int64_t>(u.value, 0);
        std::memcpy(&value.d, &bits, sizeof value.d);
        break;
      }
      case ValueKind::kString: value.s = v.string(u.value, 0); break;
      case ValueKind::kIntList:
      case ValueKind::kDoubleList:
      case ValueKind::kBoolList:
      case ValueKind::kTensorList:
      case ValueKind::kOptionalTensorList: {
        uint32_t elem = value.kind == ValueKind::kBoolList                                            ? 1
                        : (value.kind == ValueKind::kIntList || value.kind == ValueKind::kDoubleList) ? 8
                                                                                                      : 4;
        fb::Vector items = v.vector(u.value, 0, elem);
        value.list = ListRef{v.pointer(items.start), items.count};
        break;
      }
      case ValueKind::kTensor: {
        Tensor& t = value.t;
        const TensorInfo info = fb::tensor_info(v, u.value, i);  // below 2^32 bytes (verified)
        t.type = info.type;
        t.dim = static_cast<uint8_t>(info.sizes.size);
        t.sizes = info.sizes.data;
        t.numel = static_cast<uint32_t>(info.numel);
        t.nbytes = static_cast<uint32_t>(info.nbytes);
        t.order = info.order;
        uint32_t constant = v.scalar<uint32_t>(u.value, schema::kDataBufferIdx);
        fb::Table alloc = v.child(u.value, schema::kAllocationInfo);
        t.constant = constant != 0;
        t.data = nullptr;
        if (t.constant) {
          // Constants are read-only: kernels and the executor never write a tensor
          // whose `constant` is set.
          t.data = const_cast<uint8_t*>(program_.constant(constant).data);
        } else if (alloc.present()) {
          uint32_t id = v.scalar<uint32_t>(alloc, 0);
          uint64_t offset = (static_cast<uint64_t>(v.scalar<uint32_t>(alloc, 2)) << 32) | v.scalar<uint32_t>(alloc, 1);
          t.data = memory.planned[id - 1].data + offset;  // within the buffer (verified)
        }
        if (placer_ != nullptr && survey.input && !survey.output && survey.uses == 1 && !t.constant) {
          place_input(t, survey.arg);
        }
        break;
      }
      case ValueKind::kNull:
      case ValueKind::kNone: break;
    }
  }
  // Lists refer to other values; their kinds are known only now.
  for (uint32_t i = 0; i < values.count; ++i) {
    const Value& value = values_[i];
    if (value.kind == ValueKind::kIntList) {
      for (uint32_t j = 0; j < value.list.count; ++j) {
        int64_t item = v.at<int64_t>(v.offset_of(value.list.items) + 8 * j);
        if (values_[item].kind != ValueKind::kInt) return bad_value(static_cast<uint32_t>(item), values_[item].kind);
      }
    } else if (value.kind == ValueKind::kTensorList || value.kind == ValueKind::kOptionalTensorList) {
      for (uint32_t j = 0; j < value.list.count; ++j) {
        int32_t item = v.at<int32_t>(v.offset_of(value.list.items) + 4 * j);
        if (item >= 0 && values_[item].kind != ValueKind::kTensor) {
          return bad_value(static_cast<uint32_t>(item), values_[item].kind);
        }
      }
    }
  }
  return {};
}

void Method::place_input(Tensor& t, uint32_t arg) {
  const Backend& backend = *placer_->backend;
  void* place = backend.input_place(backend.context, placer_->handle, arg, t.nbytes);
  const size_t alignment = element_size(static_cast<int8_t>(t.type));
  if (place != nullptr && (alignment <= 1 || reinterpret_cast<uintptr_t>(place) % alignment == 0)) {
    t.data = place;
  }
}

Status Method::check_outputs() const {
  fb::Verified v(program_);
  const fb::Vector outputs = v.vector(v.table(program_.plan_offset()), schema::kOutputs, 4);
  for (uint32_t k = 0; k < outputs.count; ++k) {
    const uint32_t index = v.at<uint32_t>(outputs.start + 4 * k);
    const Tensor& t = values_[index].t;  // a tensor (verified at load)
    if (t.data == nullptr && t.nbytes != 0) return Error{ErrorCode::kMethodOutputWithoutMemory, k, index};
  }
  return {};
}

// An instruction's charge against the work budget (method.h): 1, plus the numel of each
// tensor argument and the item count of each tensor list argument of a kernel or delegate
// call. O(its arguments). `arguments` is its call_args (an fb::Vector).
uint64_t Method::charge(const void* arguments) const {
  fb::Verified v(program_);
  const auto& args = *static_cast<const fb::Vector*>(arguments);
  uint64_t work = 1;
  for (uint32_t j = 0; j < args.count; ++j) {
    const Value& arg = values_[v.at<int32_t>(args.start + 4 * j)];
    if (arg.kind == ValueKind::kTensor)
      work += arg.t.numel;
    else if (is_tensor_list(static_cast<uint8_t>(arg.kind)))
      work += arg.list.count;
  }
  return work;
}

Status Method::bind_delegates(const BackendTable& backends) {
  for (size_t i = 0; i < program_.delegate_count(); ++i) {
    DelegateInfo info = program_.delegate(i);
    const Backend* backend = backends.find(info.id);
    if (backend == nullptr) return Error{ErrorCode::kMethodMissingBackend, static_cast<uint32_t>(i), 0};
    BackendInitArgs args{&program_, static_cast<uint32_t>(i), info.payload, info.compile_specs};
    KILN_TRY(void* handle, backend->init(backend->context, args));
    delegates_[i] = DelegateSlot{backend, handle};
  }
  return {};
}

// Jumps go forward only (verified at load): pc rises with every instruction.
Status Method::execute() {
  fb::Verified v(program_);
  const fb::Vector chain{instructions_, instruction_count_};
  uint64_t left = budget_;
  for (uint32_t pc = 0; pc < instruction_count_;) {
    const fb::Union u = v.union_at(v.element(chain, pc));
    const fb::Vector args = call_args(v, u);
    const uint64_t cost = charge(&args);
    if (cost > left) return Error{ErrorCode::kMethodWorkBudget, pc, saturate(budget_)};
    left -= cost;
    uint32_t next = pc + 1;
    KILN_CHECK(run_instruction(&u, &args, pc, &next));
    pc = next;
  }
  return {};
}

// `instruction` is instruction `index`'s fb::Union, `arguments` its call_args.
Status Method::run_instruction(const void* instruction, const void* arguments, uint32_t index, uint32_t* next) {
  fb::Verified v(program_);
  const auto& u = *static_cast<const fb::Union*>(instruction);
  switch (u.type) {
    case schema::kKernelCall: return call_kernel(&u.value, arguments, index);
    case schema::kDelegateCall: return call_delegate(&u.value, arguments);
    case schema::kMoveCall: {
      uint32_t from = static_cast<uint32_t>(v.scalar<int32_t>(u.value, 0));
      uint32_t to = static_cast<uint32_t>(v.scalar<int32_t>(u.value, 1));
      if (values_[to].kind != values_[from].kind) {
        return bad_instruction(InstructionDefect::kMoveKindMismatch, index);
      }
      // A tensor moves with its memory: one without (not yet set) would leave `to`, perhaps
      // a program output, without memory after create checked that it had some.
      const Value& moved = values_[from];
      if (moved.kind == ValueKind::kTensor && moved.t.data == nullptr && moved.t.nbytes != 0) {
        return Error{ErrorCode::kMethodNoData, from, 0};
      }
      values_[to] = moved;
      return {};
    }
    case schema::kJumpFalseCall: {
      const Value& cond = values_[v.scalar<int32_t>(u.value, 0)];
      if (cond.kind != ValueKind::kBool) return bad_instruction(InstructionDefect::kConditionNotBool, index);
      if (!cond.b) *next = static_cast<uint32_t>(v.scalar<int32_t>(u.value, 1));
      return {};
    }
    case schema::kFreeCall: return {};  // planned memory is static: nothing to free
    default: break;
  }
  return bad_instruction(InstructionDefect::kUnknownKind, index);
}

Status Method::call_kernel(const void* table, const void* arguments, uint32_t index) {
  fb::Verified v(program_);
  const auto& call = *static_cast<const fb::Table*>(table);
  int32_t op = v.scalar<int32_t>(call, 0);
  const auto& args = *static_cast<const fb::Vector*>(arguments);
  if (args.count < 2) return bad_instruction(InstructionDefect::kKernelWithoutOut, index);
  KernelArgs kernel_args(values_, program_.value_count(), static_cast<const int32_t*>(v.pointer(args.start)),
                         args.count);
  return kernels_[op](kernel_args);
}

Status Method::call_delegate(const void* table, const void* arguments) {
  fb::Verified v(program_);
  const auto& call = *static_cast<const fb::Table*>(table);
  int32_t delegate = v.scalar<int32_t>(call, 0);
  const auto& args = *static_cast<const fb::Vector*>(arguments);
  for (uint32_t j = 0; j < args.count; ++j) {
    int32_t value = v.at<int32_t>(args.start + 4 * j);
    const Value& arg = values_[value];
    if (arg.kind != ValueKind::kTensor) return bad_value(static_cast<uint32_t>(value), arg.kind);
    if (arg.t.data == nullptr && arg.t.nbytes != 0) {
      return Error{ErrorCode::kMethodNoData, static_cast<uint32_t>(value), 0};
    }
  }
  const DelegateArgs tensors(values_, static_cast<const int32_t*>(v.pointer(args.start)), args.count);
  const DelegateSlot& slot = delegates_[delegate];
  return slot.backend->execute(slot.backend->context, slot.handle, tensors);
}

size_t Method::input_count() const { return program_.input_count(); }
size_t Method::output_count() const { return program_.output_count(); }

Tensor* Method::input(size_t i) const {
  if (values_ == nullptr || i >= program_.input_count()) return nullptr;
  return &values_[fb::io_value(fb::Verified(program_), program_.plan_offset(), schema::kInputs, i)].t;
}

const Tensor* Method::output(size_t i) const {
  if (values_ == nullptr || i >= program_.output_count()) return nullptr;
  return &values_[fb::io_value(fb::Verified(program_), program_.plan_offset(), schema::kOutputs, i)].t;
}

Status Method::set_input(size_t i, void* data, size_t nbytes) {
  Tensor* t = input(i);
  if (t == nullptr) return Error{ErrorCode::kMethodBadInput, static_cast<uint32_t>(i), 0};
  if (nbytes != t->nbytes || (data == nullptr && nbytes != 0)) {
    return Error{ErrorCode::kMethodBadInput, static_cast<uint32_t>(i), static_cast<uint32_t>(nbytes)};
  }
  const size_t alignment = element_size(static_cast<int8_t>(t->type));
  if (alignment > 1 && reinterpret_cast<uintptr_t>(data) % alignment != 0) {
    return Error{ErrorCode::kMisaligned, static_cast<uint32_t>(reinterpret_cast<uintptr_t>(data)),
                 static_cast<uint32_t>(alignment)};
  }
  t->data = data;
  t->constant = false;
  return {};
}

}  // namespace kiln::runtime
