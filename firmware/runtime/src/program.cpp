// Program::load: the one verification pass over a .pte, and the accessors.
#include "kiln/runtime/program.h"

#include <cstring>

#include "fb.h"
#include "kiln/runtime/try.h"
#include "schema.h"

namespace kiln::runtime {

namespace {

constexpr uint32_t kIdentifier = 0x32315445;  // "ET12" read little-endian
constexpr uint32_t kHeaderMagic = 0x30306865;  // "eh00"
constexpr uint32_t kHeaderOffset = 8;
constexpr uint32_t kHeaderMinLength = 24;
constexpr uint32_t kHeaderMaxLength = 64 - kHeaderOffset;  // within the first 64 bytes
constexpr uint32_t kAlignment = 16;
constexpr uint64_t kMaxNbytes = 0xFFFFFFFFu;

Error header_error(HeaderField field, uint64_t value) {
  return Error{ErrorCode::kPteBadHeader, static_cast<uint32_t>(field), static_cast<uint32_t>(value)};
}

Error unsupported(Feature feature, uint32_t detail = 0) {
  return Error{ErrorCode::kPteUnsupported, static_cast<uint32_t>(feature), detail};
}

Error bad_tensor(TensorDefect defect, uint32_t value) {
  return Error{ErrorCode::kPteBadTensor, static_cast<uint32_t>(defect), value};
}

// Reads a little-endian uint64 from the file header (size already checked).
uint64_t u64_at(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

// The verification pass: walks everything once, spending the verifier's budget. Each
// step records a failure in the verifier (the first one is kept: fb::Verifier) and
// returns; Program::load reports it when the pass is over.
struct ProgramLoader {
  Program& p;
  fb::Verifier r;
  fb::Vector segments;
  uint32_t n_constants = 0;   // including the reserved constant 0
  uint32_t n_inline = 0;      // backend_delegate_data entries
  uint32_t state_plans = 0;   // plans that declare memory id kStateMemoryId
  int64_t state_size = 0;     // the size the first of them declares

  Status header() {
    const uint8_t* b = p.base_;
    p.program_size_ = static_cast<uint32_t>(p.size_);
    p.segment_base_ = p.segment_end_ = p.size_;
    if (p.size_ < kHeaderOffset + 4 || u32_at(b + kHeaderOffset) != kHeaderMagic) return {};
    if (p.size_ < kHeaderOffset + kHeaderMinLength) {
      return Error{ErrorCode::kPteTooShort, static_cast<uint32_t>(p.size_), kHeaderOffset + kHeaderMinLength};
    }
    uint32_t length = u32_at(b + kHeaderOffset + 4);
    if (length < kHeaderMinLength || length > kHeaderMaxLength) {
      return header_error(HeaderField::kLength, length);
    }
    if (p.size_ < kHeaderOffset + length) {
      return Error{ErrorCode::kPteTooShort, static_cast<uint32_t>(p.size_), kHeaderOffset + length};
    }
    uint64_t program_size = u64_at(b + kHeaderOffset + 8);
    uint64_t base = u64_at(b + kHeaderOffset + 16);
    bool has_data_size = length >= 32;
    uint64_t data_size = has_data_size ? u64_at(b + kHeaderOffset + 24) : 0;
    if (program_size < kHeaderOffset + length || program_size > p.size_) {
      return header_error(HeaderField::kProgramSize, program_size);
    }
    if (base != 0 && (base < program_size || base > p.size_)) {
      return header_error(HeaderField::kSegmentBaseOffset, base);
    }
    if ((data_size != 0 && base == 0) || (has_data_size && data_size > p.size_ - base)) {
      return header_error(HeaderField::kSegmentDataSize, data_size);
    }
    p.program_size_ = static_cast<uint32_t>(program_size);
    if (base != 0) {
      p.segment_base_ = base;
      p.segment_end_ = has_data_size ? base + data_size : p.size_;
    }
    return {};
  }

  void segment_table(const fb::Table& program) {
    segments = r.vector(program, schema::kSegments, 4);
    uint64_t room = p.segment_end_ - p.segment_base_;
    for (uint32_t i = 0; i < segments.count; ++i) {
      const fb::Table s = r.element(segments, i);
      const uint64_t offset = r.scalar<uint64_t>(s, 0);
      const uint64_t size = r.scalar<uint64_t>(s, 1);
      if (offset > room || size > room - offset) {
        return r.fail(Error{ErrorCode::kPteOutOfBounds, static_cast<uint32_t>(p.segment_base_ + offset),
                            static_cast<uint32_t>(room)});
      }
    }
  }

  // The vector of byte-vector tables at `slot` (constant_buffer, backend_delegate_data): its count.
  uint32_t blobs(const fb::Table& program, unsigned slot) {
    const fb::Vector v = r.vector(program, slot, 4);
    for (uint32_t i = 0; i < v.count; ++i) r.vector(r.element(v, i), 0, 1);
    return v.count;
  }

  void constants(const fb::Table& program) {
    const uint32_t n_buffers = blobs(program, schema::kConstantBuffer);
    const fb::Table cs = r.child(program, schema::kConstantSegment);
    const fb::Vector offsets = r.vector(cs, 1, 8);
    if (offsets.count == 0) {
      n_constants = n_buffers;
      return;
    }
    if (n_buffers != 0) return r.fail(unsupported(Feature::kBothConstantKinds));
    const uint32_t index = r.scalar<uint32_t>(cs, 0);
    r.check_index(index, segments.count);
    const uint64_t size = p.segment(index).size;
    uint64_t previous = 0;
    for (uint32_t i = 0; i < offsets.count; ++i) {
      const uint64_t at = r.read<uint64_t>(offsets.start + 8ull * i);
      if (at < previous || at > size) {
        return r.fail(Error{ErrorCode::kPteOutOfBounds, static_cast<uint32_t>(at), static_cast<uint32_t>(size)});
      }
      previous = at;
    }
    n_constants = offsets.count;
  }

  void named_data(const fb::Table& program) {
    const fb::Vector v = r.vector(program, schema::kNamedData, 4);
    for (uint32_t i = 0; i < v.count; ++i) {
      const fb::Table t = r.element(v, i);
      r.string(t, 0);
      r.check_index(r.scalar<uint32_t>(t, 1), segments.count);
    }
  }

  void index_vector(const fb::Table& t, unsigned slot, uint32_t n_values, bool optional) {
    const fb::Vector v = r.vector(t, slot, 4);
    for (uint32_t i = 0; i < v.count; ++i) {
      const int32_t index = r.read<int32_t>(v.start + 4ull * i);
      if (!(optional && index == -1)) r.check_index(index, n_values);
    }
  }

  void tensor(const fb::Table& t, uint32_t value, const fb::Vector& buffer_sizes) {
    // extra_tensor_info (absent: every read below is 0): its name, and its data in the .pte
    // (or in planned memory: location SEGMENT, 0) on the CPU (device_type 0).
    const fb::Table extra = r.child(t, schema::kExtraTensorInfo);
    r.string(extra, schema::kFullyQualifiedName);
    if ((r.scalar<int8_t>(extra, schema::kLocation) | r.scalar<int8_t>(extra, schema::kDeviceType)) != 0) {
      return r.fail(unsupported(Feature::kExtraTensorInfo, value));
    }
    const int8_t type = r.scalar<int8_t>(t, schema::kScalarType);
    const size_t elem = element_size(type);
    if (elem == 0) return r.fail(Error{ErrorCode::kPteBadEnum, t.pos, static_cast<uint32_t>(type)});
    const fb::Vector sizes = r.vector(t, schema::kSizes, 4);
    const fb::Vector dim_order = r.vector(t, schema::kDimOrder, 1);
    if (sizes.count > kMaxDims) return r.fail(bad_tensor(TensorDefect::kTooManyDims, value));
    uint64_t numel = 1;
    int32_t dims[kMaxDims];
    for (uint32_t d = 0; d < sizes.count; ++d) {
      dims[d] = r.read<int32_t>(sizes.start + 4ull * d);
      if (dims[d] < 0) return r.fail(bad_tensor(TensorDefect::kNegativeSize, value));
      numel *= static_cast<uint64_t>(dims[d]);
      if (numel * elem > kMaxNbytes) return r.fail(bad_tensor(TensorDefect::kTooLarge, value));
    }
    if (dim_order.count != sizes.count) return r.fail(bad_tensor(TensorDefect::kDimOrderLength, value));
    uint8_t order[kMaxDims];
    for (uint32_t d = 0; d < dim_order.count; ++d) order[d] = r.read<uint8_t>(dim_order.start + d);
    DimOrder layout;
    if (!dim_order_of(dims, order, dim_order.count, &layout)) return r.fail(unsupported(Feature::kDimOrder, value));
    const int8_t dynamism = r.scalar<int8_t>(t, schema::kShapeDynamism);
    if (dynamism < 0 || dynamism > 2) {
      return r.fail(Error{ErrorCode::kPteBadEnum, t.pos, static_cast<uint32_t>(dynamism)});
    }
    if (dynamism != 0) return r.fail(unsupported(Feature::kDynamicShape, value));
    const uint64_t nbytes = numel * elem;
    const uint32_t constant = r.scalar<uint32_t>(t, schema::kDataBufferIdx);
    const fb::Table alloc = r.child(t, schema::kAllocationInfo);
    if (constant != 0) {
      if (alloc.present()) return r.fail(bad_tensor(TensorDefect::kConstantAndPlanned, value));
      r.check_index(constant, n_constants);
      const Span<const uint8_t> data = p.constant(constant);
      if (data.size < nbytes) return r.fail(bad_tensor(TensorDefect::kConstantTooSmall, value));
      if (reinterpret_cast<uintptr_t>(data.data) % elem != 0) {
        return r.fail(bad_tensor(TensorDefect::kMisaligned, value));
      }
    }
    if (alloc.present()) {
      const uint32_t id = r.scalar<uint32_t>(alloc, 0);
      const uint32_t low = r.scalar<uint32_t>(alloc, 1);
      const uint32_t high = r.scalar<uint32_t>(alloc, 2);
      if (id == 0 || id >= buffer_sizes.count) return r.fail(bad_tensor(TensorDefect::kBadMemoryId, value));
      const int64_t capacity = r.read<int64_t>(buffer_sizes.start + 8ull * id);
      const uint64_t offset = (static_cast<uint64_t>(high) << 32) | low;
      // Planned buffers are 16-byte aligned (method.h), so this aligns the data.
      if (offset % elem != 0) return r.fail(bad_tensor(TensorDefect::kMisaligned, value));
      if (capacity < 0 || offset > static_cast<uint64_t>(capacity) ||
          nbytes > static_cast<uint64_t>(capacity) - offset) {
        return r.fail(bad_tensor(TensorDefect::kOutsideBuffer, value));
      }
    }
  }

  void evalue(const fb::Table& t, uint32_t index, uint32_t n_values, const fb::Vector& buffer_sizes) {
    const fb::Union u = r.union_at(t, 0);
    switch (static_cast<ValueKind>(u.type)) {
      case ValueKind::kNull: return;
      case ValueKind::kInt:
      case ValueKind::kDouble: r.scalar<int64_t>(u.value, 0); return;
      case ValueKind::kBool: r.scalar<uint8_t>(u.value, 0); return;
      case ValueKind::kString: r.string(u.value, 0); return;
      case ValueKind::kTensor: return tensor(u.value, index, buffer_sizes);
      case ValueKind::kIntList: {
        const fb::Vector v = r.vector(u.value, 0, 8);
        for (uint32_t i = 0; i < v.count; ++i) r.check_index(r.read<int64_t>(v.start + 8ull * i), n_values);
        return;
      }
      case ValueKind::kDoubleList: r.vector(u.value, 0, 8); return;
      case ValueKind::kBoolList: r.vector(u.value, 0, 1); return;
      case ValueKind::kTensorList: return index_vector(u.value, 0, n_values, false);
      case ValueKind::kOptionalTensorList: return index_vector(u.value, 0, n_values, true);
      case ValueKind::kNone: break;
    }
    r.fail(Error{ErrorCode::kPteBadUnion, t.pos, u.type});
  }

  // Instruction `index` of a chain of n_instructions. A jump must go forward (its
  // destination past itself, at most one past the end): with no loop, one execute() runs
  // each instruction at most once.
  void instruction(const fb::Table& t, const fb::Table& plan, uint32_t n_values, uint32_t index,
                   uint32_t n_instructions) {
    const fb::Union u = r.union_at(t, 0);
    switch (u.type) {
      case schema::kKernelCall:
      case schema::kDelegateCall: {
        const int32_t target = r.scalar<int32_t>(u.value, 0);
        const unsigned slot = u.type == schema::kKernelCall ? schema::kOperators : schema::kDelegates;
        r.check_index(target, r.vector(plan, slot, 4).count);
        return index_vector(u.value, 1, n_values, false);
      }
      case schema::kMoveCall:
      case schema::kJumpFalseCall: {
        const int32_t first = r.scalar<int32_t>(u.value, 0);
        const int32_t second = r.scalar<int32_t>(u.value, 1);
        r.check_index(first, n_values);
        r.check_index(second, u.type == schema::kMoveCall ? n_values : n_instructions + 1);
        if (u.type == schema::kJumpFalseCall && static_cast<uint32_t>(second) <= index) {
          r.fail(unsupported(Feature::kBackwardJump, index));
        }
        return;
      }
      case schema::kFreeCall: return r.check_index(r.scalar<int32_t>(u.value, 0), n_values);
      default: break;
    }
    r.fail(Error{ErrorCode::kPteBadUnion, t.pos, u.type});
  }

  void stacktrace(const fb::Table& chain, uint32_t n_instructions) {
    const fb::Vector lists = r.vector(chain, schema::kStacktrace, 4);
    if (r.field(chain, schema::kStacktrace) != 0 && lists.count != n_instructions) {
      return r.fail(Error{ErrorCode::kPteBadIndex, lists.count, n_instructions});
    }
    for (uint32_t i = 0; i < lists.count; ++i) {
      const fb::Vector frames = r.vector(r.element(lists, i), 0, 4);
      for (uint32_t j = 0; j < frames.count; ++j) {
        const fb::Table frame = r.element(frames, j);
        r.string(frame, 0);
        r.scalar<int32_t>(frame, 1);
        r.string(frame, 2);
        r.string(frame, 3);
      }
    }
  }

  void chain(const fb::Table& t, const fb::Table& plan, uint32_t n_values) {
    index_vector(t, schema::kChainInputs, n_values, false);
    index_vector(t, schema::kChainOutputs, n_values, false);
    const fb::Vector instructions = r.vector(t, schema::kInstructions, 4);
    for (uint32_t i = 0; i < instructions.count; ++i) {
      instruction(r.element(instructions, i), plan, n_values, i, instructions.count);
    }
    stacktrace(t, instructions.count);
  }

  void delegate(const fb::Table& t) {
    r.string(t, schema::kId);
    const fb::Table processed = r.child(t, schema::kProcessed);
    if (!processed.present()) return r.fail(Error{ErrorCode::kPteMissingField, t.pos, schema::kProcessed});
    const int8_t location = r.scalar<int8_t>(processed, 0);
    const uint32_t index = r.scalar<uint32_t>(processed, 1);
    if (location == static_cast<int8_t>(DataLocation::kInline)) {
      r.check_index(index, n_inline);
    } else if (location == static_cast<int8_t>(DataLocation::kSegment)) {
      r.check_index(index, segments.count);
    } else {
      return r.fail(Error{ErrorCode::kPteBadEnum, processed.pos, static_cast<uint32_t>(location)});
    }
    const fb::Vector specs = r.vector(t, schema::kCompileSpecs, 4);
    for (uint32_t i = 0; i < specs.count; ++i) {
      const fb::Table spec = r.element(specs, i);
      r.string(spec, 0);
      r.vector(spec, 1, 1);
    }
  }

  void op(const fb::Table& t) {
    r.string(t, 0);
    r.string(t, 1);
  }

  void tables_each(const fb::Table& plan, unsigned slot, void (ProgramLoader::*check)(const fb::Table&)) {
    const fb::Vector v = r.vector(plan, slot, 4);
    for (uint32_t i = 0; i < v.count; ++i) (this->*check)(r.element(v, i));
  }

  // The plan's inputs or outputs (`slot`): values of the plan, and with `tensors` (plan 0, which
  // the handle load returns reads) tensors; Program::method checks another plan's when asked for
  // it (a constant method's output is an Int).
  void io_values(const fb::Table& plan, const fb::Vector& values, unsigned slot, bool tensors) {
    const fb::Vector v = r.vector(plan, slot, 4);
    for (uint32_t i = 0; i < v.count; ++i) {
      const int32_t index = r.read<int32_t>(v.start + 4ull * i);
      r.check_index(index, values.count);
      if (!tensors) continue;
      const fb::Union u = r.union_at(r.element(values, static_cast<uint32_t>(index)), 0);
      if (u.type != static_cast<uint8_t>(ValueKind::kTensor)) return r.fail(unsupported(Feature::kNonTensorIo, i));
    }
  }

  // Plan `index`: its tables, and its state arena's size against the earlier plans'.
  void plan(const fb::Table& t, uint32_t index) {
    r.string(t, schema::kName);
    const fb::Table meta = r.child(t, schema::kContainerMetaType);
    if (meta.present()) {
      r.string(meta, 0);
      r.string(meta, 1);
    }
    if (r.vector(t, schema::kNonConstBufferDevice, 4).count != 0) {
      return r.fail(unsupported(Feature::kNonConstBufferDevice));
    }
    const fb::Vector buffer_sizes = r.vector(t, schema::kNonConstBufferSizes, 8);
    if (buffer_sizes.count > kStateMemoryId) {
      const int64_t size = r.read<int64_t>(buffer_sizes.start + 8ull * kStateMemoryId);
      if (state_plans++ != 0 && size != state_size) {
        return r.fail(Error{ErrorCode::kPteStateSize, index, static_cast<uint32_t>(size)});
      }
      state_size = size;
    }
    const fb::Vector values = r.vector(t, schema::kValues, 4);
    for (uint32_t i = 0; i < values.count; ++i) evalue(r.element(values, i), i, values.count, buffer_sizes);
    io_values(t, values, schema::kInputs, index == 0);
    io_values(t, values, schema::kOutputs, index == 0);
    tables_each(t, schema::kOperators, &ProgramLoader::op);
    tables_each(t, schema::kDelegates, &ProgramLoader::delegate);
    const fb::Vector chains = r.vector(t, schema::kChains, 4);
    if (chains.count != 1) return r.fail(unsupported(Feature::kChains, chains.count));
    const fb::Table c = r.element(chains, 0);
    chain(c, t, values.count);
    if (index == 0) {  // the handle load returns reads plan 0
      p.plan_ = t.pos;
      p.chain_ = c.pos;
      p.value_count_ = values.count;
    }
  }

  void program() {
    const fb::Table program = r.table(r.read<uint32_t>(0));
    p.root_ = program.pos;
    r.scalar<uint32_t>(program, schema::kVersion);
    if (r.vector(program, schema::kMutableDataSegments, 4).count != 0) {
      return r.fail(unsupported(Feature::kMutableDataSegments));
    }
    segment_table(program);
    n_inline = blobs(program, schema::kBackendDelegateData);
    constants(program);
    named_data(program);
    const fb::Vector plans = r.vector(program, schema::kExecutionPlan, 4);
    if (plans.count == 0) return r.fail(unsupported(Feature::kNoExecutionPlan));
    for (uint32_t i = 0; i < plans.count; ++i) plan(r.element(plans, i), i);
  }
};

Result<Program> Program::load(const void* pte, size_t size) {
  auto address = reinterpret_cast<uintptr_t>(pte);
  if (address % kAlignment != 0) {
    return Error{ErrorCode::kMisaligned, static_cast<uint32_t>(address), kAlignment};
  }
  if (size < 8) return Error{ErrorCode::kPteTooShort, static_cast<uint32_t>(size), 8};
  if (size > kMaxNbytes) return Error{ErrorCode::kTooLarge, 0xFFFFFFFFu, static_cast<uint32_t>(kMaxNbytes)};
  Program p;
  p.base_ = static_cast<const uint8_t*>(pte);
  p.size_ = size;
  uint32_t identifier = u32_at(p.base_ + 4);
  if (identifier != kIdentifier) return Error{ErrorCode::kPteBadIdentifier, identifier, kIdentifier};
  ProgramLoader loader{p, fb::Verifier(nullptr, 0, 0), {}};
  KILN_CHECK(loader.header());
  loader.r = fb::Verifier(p.base_, p.program_size_, 8 * static_cast<int64_t>(p.program_size_) + 4096);
  loader.program();
  if (!loader.r.ok()) return loader.r.error();
  return p;
}

// --- Accessors (on verified data: fb::Verified) ------------------------------------

namespace fb {

uint32_t io_value(const Verified& v, uint32_t plan, unsigned slot, size_t i) {
  return v.at<uint32_t>(v.vector(v.table(plan), slot, 4).start + 4 * static_cast<uint32_t>(i));
}

TensorInfo tensor_info(const Verified& v, const Table& tensor, uint32_t value_index) {
  const Vector sizes = v.vector(tensor, schema::kSizes, 4);
  const int8_t type = v.scalar<int8_t>(tensor, schema::kScalarType);
  const auto* dims = static_cast<const int32_t*>(v.pointer(sizes.start));  // 4-byte aligned (verified)
  size_t numel = 1;
  for (uint32_t d = 0; d < sizes.count; ++d) numel *= static_cast<size_t>(dims[d]);
  const Vector dim_order = v.vector(tensor, schema::kDimOrder, 1);
  DimOrder order = DimOrder::kContiguous;  // one of the two (verified)
  (void)dim_order_of(dims, static_cast<const uint8_t*>(v.pointer(dim_order.start)), dim_order.count, &order);
  return TensorInfo{
      static_cast<ScalarType>(type), {dims, sizes.count}, numel * element_size(type), value_index, numel, order};
}

}  // namespace fb

namespace {

fb::Vector plan_vector(const fb::Verified& v, uint32_t plan, unsigned slot, uint32_t elem) {
  return v.vector(v.table(plan), slot, elem);
}

TensorInfo io_tensor(const Program& p, unsigned slot, size_t i) {
  const fb::Verified v(p);
  const uint32_t index = fb::io_value(v, p.plan_offset(), slot, i);
  const fb::Table value = v.element(plan_vector(v, p.plan_offset(), schema::kValues, 4), index);
  return fb::tensor_info(v, v.union_at(value).value, index);
}

}  // namespace

size_t Program::method_count() const {
  const fb::Verified v(*this);
  return v.vector(v.table(root_), schema::kExecutionPlan, 4).count;
}

StringView Program::method_name(size_t i) const {
  const fb::Verified v(*this);
  const fb::Vector plans = v.vector(v.table(root_), schema::kExecutionPlan, 4);
  return v.string(v.element(plans, static_cast<uint32_t>(i < plans.count ? i : plans.count)), schema::kName);
}

Result<size_t> Program::method_index(StringView name) const {
  const size_t n = method_count();
  for (size_t i = 0; i < n; ++i) {
    if (method_name(i) == name) return i;
  }
  return Error{ErrorCode::kMethodNotFound, UINT32_MAX, static_cast<uint32_t>(n)};
}

constexpr unsigned kIoSlots[] = {schema::kInputs, schema::kOutputs};

// As the loader records plan 0 (every plan has exactly one chain: verified), after checking what
// the loader checks of plan 0 only: its inputs and outputs are tensors.
Result<Program> Program::method(size_t i) const {
  const fb::Verified v(*this);
  const fb::Vector plans = v.vector(v.table(root_), schema::kExecutionPlan, 4);
  if (i >= plans.count) return Error{ErrorCode::kMethodNotFound, static_cast<uint32_t>(i), plans.count};
  const fb::Table plan = v.element(plans, static_cast<uint32_t>(i));
  const fb::Vector values = v.vector(plan, schema::kValues, 4);
  for (const unsigned slot : kIoSlots) {
    const fb::Vector io = v.vector(plan, slot, 4);
    for (uint32_t k = 0; k < io.count; ++k) {
      if (v.union_at(v.element(values, v.at<uint32_t>(io.start + 4 * k))).type != uint8_t(ValueKind::kTensor)) {
        return unsupported(Feature::kNonTensorIo, k);
      }
    }
  }
  Program p = *this;
  p.plan_ = plan.pos;
  p.chain_ = v.element(v.vector(plan, schema::kChains, 4), 0).pos;
  p.value_count_ = v.vector(plan, schema::kValues, 4).count;
  return p;
}

Result<int64_t> Program::constant_method(StringView name) const {
  KILN_TRY(const size_t index, method_index(name));
  const fb::Verified v(*this);
  const fb::Table plan = v.element(v.vector(v.table(root_), schema::kExecutionPlan, 4), static_cast<uint32_t>(index));
  const fb::Vector outputs = v.vector(plan, schema::kOutputs, 4);
  const uint32_t value = outputs.count == 1 ? v.at<uint32_t>(outputs.start) : UINT32_MAX;
  const fb::Union u = v.union_at(v.element(v.vector(plan, schema::kValues, 4), value));
  if (v.vector(plan, schema::kInputs, 4).count != 0 || u.type != uint8_t(ValueKind::kInt)) {
    return Error{ErrorCode::kMethodBadValue, value, u.type};
  }
  return v.scalar<int64_t>(u.value, 0);
}

size_t Program::input_count() const { return plan_vector(fb::Verified(*this), plan_, schema::kInputs, 4).count; }
size_t Program::output_count() const { return plan_vector(fb::Verified(*this), plan_, schema::kOutputs, 4).count; }
TensorInfo Program::input(size_t i) const { return io_tensor(*this, schema::kInputs, i); }
TensorInfo Program::output(size_t i) const { return io_tensor(*this, schema::kOutputs, i); }

size_t Program::planned_buffer_count() const {
  const uint32_t n = plan_vector(fb::Verified(*this), plan_, schema::kNonConstBufferSizes, 8).count;
  return n ? n - 1 : 0;
}

uint64_t Program::planned_buffer_size(uint32_t memory_id) const {
  if (memory_id == 0 || memory_id > planned_buffer_count()) return 0;
  const fb::Verified v(*this);
  const int64_t size = v.at<int64_t>(plan_vector(v, plan_, schema::kNonConstBufferSizes, 8).start + 8 * memory_id);
  return size < 0 ? 0 : static_cast<uint64_t>(size);
}

namespace {

// Value `index` of `values` when it is a tensor planned in the state arena: its table and its
// allocation's; absent tables otherwise.
struct StateValue {
  fb::Table tensor;
  fb::Table allocation;
};
StateValue state_value(const fb::Verified& v, const fb::Vector& values, uint32_t index) {
  const fb::Union u = v.union_at(v.element(values, index));
  if (u.type != static_cast<uint8_t>(ValueKind::kTensor)) return {};
  const fb::Table allocation = v.child(u.value, schema::kAllocationInfo);
  if (v.scalar<uint32_t>(allocation, 0) != kStateMemoryId) return {};
  return {u.value, allocation};
}

}  // namespace

size_t Program::state_count() const {
  const fb::Verified v(*this);
  const fb::Vector values = plan_vector(v, plan_, schema::kValues, 4);
  size_t n = 0;
  for (uint32_t k = 0; k < values.count; ++k) n += state_value(v, values, k).tensor.present();
  return n;
}

StateTensor Program::state(size_t i) const {
  const fb::Verified v(*this);
  const fb::Vector values = plan_vector(v, plan_, schema::kValues, 4);
  for (uint32_t k = 0; k < values.count; ++k) {
    const StateValue s = state_value(v, values, k);
    if (!s.tensor.present() || i-- != 0) continue;
    const uint64_t offset =
        (static_cast<uint64_t>(v.scalar<uint32_t>(s.allocation, 2)) << 32) | v.scalar<uint32_t>(s.allocation, 1);
    const fb::Table extra = v.child(s.tensor, schema::kExtraTensorInfo);
    return StateTensor{v.string(extra, schema::kFullyQualifiedName), offset, fb::tensor_info(v, s.tensor, k)};
  }
  return StateTensor{{}, 0, TensorInfo{}};
}

size_t Program::operator_count() const { return plan_vector(fb::Verified(*this), plan_, schema::kOperators, 4).count; }

OperatorInfo Program::op(size_t i) const {
  const fb::Verified v(*this);
  const fb::Table t = v.element(plan_vector(v, plan_, schema::kOperators, 4), static_cast<uint32_t>(i));
  return OperatorInfo{v.string(t, 0), v.string(t, 1)};
}

size_t Program::delegate_count() const { return plan_vector(fb::Verified(*this), plan_, schema::kDelegates, 4).count; }

Span<const uint8_t> Program::segment(uint32_t index) const {
  const fb::Verified v(*this);
  const fb::Table s = v.element(v.vector(v.table(root_), schema::kSegments, 4), index);
  if (!s.present()) return {};
  return {base_ + segment_base_ + v.scalar<uint64_t>(s, 0), static_cast<size_t>(v.scalar<uint64_t>(s, 1))};
}

DelegateInfo Program::delegate(size_t i) const {
  const fb::Verified v(*this);
  const fb::Table t = v.element(plan_vector(v, plan_, schema::kDelegates, 4), static_cast<uint32_t>(i));
  const fb::Table processed = v.child(t, schema::kProcessed);
  const uint32_t index = v.scalar<uint32_t>(processed, 1);
  DelegateInfo info;
  info.id = v.string(t, schema::kId);
  if (v.scalar<int8_t>(processed, 0) == static_cast<int8_t>(DataLocation::kSegment)) {
    info.payload = segment(index);
  } else {
    const fb::Vector inline_data = v.vector(v.table(root_), schema::kBackendDelegateData, 4);
    info.payload = v.bytes(v.element(inline_data, index), 0);
  }
  const fb::Vector specs = v.vector(t, schema::kCompileSpecs, 4);
  info.compile_specs.base_ = base_;
  info.compile_specs.vector_ = specs.start;
  info.compile_specs.count_ = specs.count;
  // CompileSpecs reads with a reader bounded by the FlatBuffer part.
  info.compile_specs.limit_ = program_size_;
  return info;
}

CompileSpec CompileSpecs::operator[](size_t i) const {
  const fb::Verified v(base_, limit_);
  const fb::Table t = v.element(fb::Vector{vector_, count_}, static_cast<uint32_t>(i));
  return CompileSpec{v.string(t, 0), v.bytes(t, 1)};
}

Span<const uint8_t> CompileSpecs::find(StringView key) const {
  for (size_t i = 0; i < count_; ++i) {
    CompileSpec spec = (*this)[i];
    if (spec.key == key) return spec.value;
  }
  return {};
}

size_t Program::named_data_count() const {
  const fb::Verified v(*this);
  return v.vector(v.table(root_), schema::kNamedData, 4).count;
}

NamedData Program::named_data(size_t i) const {
  const fb::Verified v(*this);
  const fb::Table t = v.element(v.vector(v.table(root_), schema::kNamedData, 4), static_cast<uint32_t>(i));
  return NamedData{v.string(t, 0), segment(v.scalar<uint32_t>(t, 1))};
}

Span<const uint8_t> Program::find_named_data(StringView key) const {
  size_t n = named_data_count();
  for (size_t i = 0; i < n; ++i) {
    NamedData entry = named_data(i);
    if (entry.key == key) return entry.data;
  }
  return {};
}

Span<const uint8_t> Program::constant(uint32_t index) const {
  const fb::Verified v(*this);
  const fb::Table program = v.table(root_);
  const fb::Table cs = v.child(program, schema::kConstantSegment);
  const fb::Vector offsets = v.vector(cs, 1, 8);
  if (offsets.count != 0) {
    if (index >= offsets.count) return {};
    const Span<const uint8_t> seg = segment(v.scalar<uint32_t>(cs, 0));
    const uint64_t start = v.at<uint64_t>(offsets.start + 8 * index);
    const uint64_t end = index + 1 < offsets.count ? v.at<uint64_t>(offsets.start + 8 * (index + 1)) : seg.size;
    return {seg.data + start, static_cast<size_t>(end - start)};
  }
  return v.bytes(v.element(v.vector(program, schema::kConstantBuffer, 4), index), 0);
}

size_t Program::instruction_count() const {
  const fb::Verified v(*this);
  return v.vector(v.table(chain_), schema::kInstructions, 4).count;
}

}  // namespace kiln::runtime
