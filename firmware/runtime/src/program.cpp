// Program::load: the one verification pass over a .pte, and the accessors.
#include "kiln/runtime/program.h"

#include <cstring>

#include "fb.h"
#include "schema.h"
#include "kiln/runtime/try.h"

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
  return Error{ErrorCode::kPteBadHeader, static_cast<uint32_t>(field),
               static_cast<uint32_t>(value)};
}

Error unsupported(Feature feature, uint32_t detail = 0) {
  return Error{ErrorCode::kPteUnsupported, static_cast<uint32_t>(feature), detail};
}

Error bad_tensor(TensorDefect defect, uint32_t value) {
  return Error{ErrorCode::kPteBadTensor, static_cast<uint32_t>(defect), value};
}

Error bad_index(int64_t index, uint32_t count) {
  return Error{ErrorCode::kPteBadIndex, static_cast<uint32_t>(index), count};
}

Status check_index(int64_t index, uint32_t count) {
  if (index < 0 || index >= count) return bad_index(index, count);
  return {};
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

// The verification pass: walks everything once, spending the reader's budget.
struct ProgramLoader {
  Program& p;
  fb::Reader r;
  fb::Vector segments;
  uint32_t n_constants = 0;   // including the reserved constant 0
  uint32_t n_inline = 0;      // backend_delegate_data entries

  Status header() {
    const uint8_t* b = p.base_;
    p.program_size_ = static_cast<uint32_t>(p.size_);
    p.segment_base_ = p.segment_end_ = p.size_;
    if (p.size_ < kHeaderOffset + 4 || u32_at(b + kHeaderOffset) != kHeaderMagic) return {};
    if (p.size_ < kHeaderOffset + kHeaderMinLength) {
      return Error{ErrorCode::kPteTooShort, static_cast<uint32_t>(p.size_),
                   kHeaderOffset + kHeaderMinLength};
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

  Status segment_table(const fb::Table& program) {
    KILN_TRY(segments, fb::vector(r, program, schema::kSegments, 4));
    uint64_t room = p.segment_end_ - p.segment_base_;
    for (uint32_t i = 0; i < segments.count; ++i) {
      KILN_TRY(fb::Table s, fb::element(r, segments, i));
      KILN_TRY(uint64_t offset, fb::scalar<uint64_t>(r, s, 0));
      KILN_TRY(uint64_t size, fb::scalar<uint64_t>(r, s, 1));
      if (offset > room || size > room - offset) {
        return Error{ErrorCode::kPteOutOfBounds, static_cast<uint32_t>(p.segment_base_ + offset),
                     static_cast<uint32_t>(room)};
      }
    }
    return {};
  }

  Status blobs(const fb::Table& program, unsigned slot, uint32_t* count) {
    KILN_TRY(fb::Vector v, fb::vector(r, program, slot, 4));
    for (uint32_t i = 0; i < v.count; ++i) {
      KILN_TRY(fb::Table t, fb::element(r, v, i));
      KILN_CHECK(fb::vector(r, t, 0, 1));
    }
    *count = v.count;
    return {};
  }

  Status constants(const fb::Table& program) {
    uint32_t n_buffers = 0;
    KILN_CHECK(blobs(program, schema::kConstantBuffer, &n_buffers));
    KILN_TRY(fb::Table cs, fb::child(r, program, schema::kConstantSegment));
    fb::Vector offsets;
    if (cs.present()) {
      KILN_TRY(offsets, fb::vector(r, cs, 1, 8));
    }
    if (offsets.count == 0) {
      n_constants = n_buffers;
      return {};
    }
    if (n_buffers != 0) return unsupported(Feature::kBothConstantKinds);
    KILN_TRY(uint32_t index, fb::scalar<uint32_t>(r, cs, 0));
    KILN_CHECK(check_index(index, segments.count));
    uint64_t size = p.segment(index).size, previous = 0;
    for (uint32_t i = 0; i < offsets.count; ++i) {
      KILN_TRY(uint64_t at, r.read<uint64_t>(offsets.start + 8ull * i));
      if (at < previous || at > size) {
        return Error{ErrorCode::kPteOutOfBounds, static_cast<uint32_t>(at), static_cast<uint32_t>(size)};
      }
      previous = at;
    }
    n_constants = offsets.count;
    return {};
  }

  Status named_data(const fb::Table& program) {
    KILN_TRY(fb::Vector v, fb::vector(r, program, schema::kNamedData, 4));
    for (uint32_t i = 0; i < v.count; ++i) {
      KILN_TRY(fb::Table t, fb::element(r, v, i));
      KILN_CHECK(fb::string(r, t, 0));
      KILN_TRY(uint32_t index, fb::scalar<uint32_t>(r, t, 1));
      KILN_CHECK(check_index(index, segments.count));
    }
    return {};
  }

  Status index_vector(const fb::Table& t, unsigned slot, uint32_t n_values, bool optional) {
    KILN_TRY(fb::Vector v, fb::vector(r, t, slot, 4));
    for (uint32_t i = 0; i < v.count; ++i) {
      KILN_TRY(int32_t index, r.read<int32_t>(v.start + 4ull * i));
      if (optional && index == -1) continue;
      KILN_CHECK(check_index(index, n_values));
    }
    return {};
  }

  Status tensor(const fb::Table& t, uint32_t value, const fb::Vector& buffer_sizes) {
    KILN_TRY(fb::Table extra, fb::child(r, t, schema::kExtraTensorInfo));
    if (extra.present()) return unsupported(Feature::kExtraTensorInfo, value);
    KILN_TRY(int8_t type, fb::scalar<int8_t>(r, t, schema::kScalarType));
    size_t elem = element_size(type);
    if (elem == 0) return Error{ErrorCode::kPteBadEnum, t.pos, static_cast<uint32_t>(type)};
    KILN_TRY(fb::Vector sizes, fb::vector(r, t, schema::kSizes, 4));
    KILN_TRY(fb::Vector dim_order, fb::vector(r, t, schema::kDimOrder, 1));
    if (sizes.count > kMaxDims) return bad_tensor(TensorDefect::kTooManyDims, value);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < sizes.count; ++d) {
      KILN_TRY(int32_t size, r.read<int32_t>(sizes.start + 4ull * d));
      if (size < 0) return bad_tensor(TensorDefect::kNegativeSize, value);
      numel *= static_cast<uint64_t>(size);
      if (numel * elem > kMaxNbytes) return bad_tensor(TensorDefect::kTooLarge, value);
    }
    if (dim_order.count != sizes.count) return bad_tensor(TensorDefect::kDimOrderLength, value);
    for (uint32_t d = 0; d < dim_order.count; ++d) {
      if (r.base[dim_order.start + d] != d) return unsupported(Feature::kDimOrder, value);
    }
    KILN_TRY(int8_t dynamism, fb::scalar<int8_t>(r, t, schema::kShapeDynamism));
    if (dynamism < 0 || dynamism > 2) {
      return Error{ErrorCode::kPteBadEnum, t.pos, static_cast<uint32_t>(dynamism)};
    }
    if (dynamism != 0) return unsupported(Feature::kDynamicShape, value);
    uint64_t nbytes = numel * elem;
    KILN_TRY(uint32_t constant, fb::scalar<uint32_t>(r, t, schema::kDataBufferIdx));
    KILN_TRY(fb::Table alloc, fb::child(r, t, schema::kAllocationInfo));
    if (constant != 0) {
      if (alloc.present()) return bad_tensor(TensorDefect::kConstantAndPlanned, value);
      KILN_CHECK(check_index(constant, n_constants));
      Span<const uint8_t> data = p.constant(constant);
      if (data.size < nbytes) return bad_tensor(TensorDefect::kConstantTooSmall, value);
      if (reinterpret_cast<uintptr_t>(data.data) % elem != 0) return bad_tensor(TensorDefect::kMisaligned, value);
    }
    if (alloc.present()) {
      KILN_TRY(uint32_t id, fb::scalar<uint32_t>(r, alloc, 0));
      KILN_TRY(uint32_t low, fb::scalar<uint32_t>(r, alloc, 1));
      KILN_TRY(uint32_t high, fb::scalar<uint32_t>(r, alloc, 2));
      if (id == 0 || id >= buffer_sizes.count) return bad_tensor(TensorDefect::kBadMemoryId, value);
      KILN_TRY(int64_t capacity, r.read<int64_t>(buffer_sizes.start + 8ull * id));
      uint64_t offset = (static_cast<uint64_t>(high) << 32) | low;
      // Planned buffers are 16-byte aligned (method.h), so this aligns the data.
      if (offset % elem != 0) return bad_tensor(TensorDefect::kMisaligned, value);
      if (capacity < 0 || offset > static_cast<uint64_t>(capacity) ||
          nbytes > static_cast<uint64_t>(capacity) - offset) {
        return bad_tensor(TensorDefect::kOutsideBuffer, value);
      }
    }
    return {};
  }

  Status evalue(const fb::Table& t, uint32_t index, uint32_t n_values, const fb::Vector& buffer_sizes) {
    KILN_TRY(fb::Union u, fb::union_at(r, t, 0));
    auto kind = static_cast<ValueKind>(u.type);
    switch (kind) {
      case ValueKind::kNull: return {};
      case ValueKind::kInt:
      case ValueKind::kDouble: {
        KILN_CHECK(fb::scalar<int64_t>(r, u.value, 0));
        return {};
      }
      case ValueKind::kBool: {
        KILN_CHECK(fb::scalar<uint8_t>(r, u.value, 0));
        return {};
      }
      case ValueKind::kString: {
        KILN_CHECK(fb::string(r, u.value, 0));
        return {};
      }
      case ValueKind::kTensor: return tensor(u.value, index, buffer_sizes);
      case ValueKind::kIntList: {
        KILN_TRY(fb::Vector v, fb::vector(r, u.value, 0, 8));
        for (uint32_t i = 0; i < v.count; ++i) {
          KILN_TRY(int64_t item, r.read<int64_t>(v.start + 8ull * i));
          KILN_CHECK(check_index(item, n_values));
        }
        return {};
      }
      case ValueKind::kDoubleList: {
        KILN_CHECK(fb::vector(r, u.value, 0, 8));
        return {};
      }
      case ValueKind::kBoolList: {
        KILN_CHECK(fb::vector(r, u.value, 0, 1));
        return {};
      }
      case ValueKind::kTensorList: return index_vector(u.value, 0, n_values, false);
      case ValueKind::kOptionalTensorList: return index_vector(u.value, 0, n_values, true);
      case ValueKind::kNone: break;
    }
    return Error{ErrorCode::kPteBadUnion, t.pos, u.type};
  }

  // Instruction `index` of a chain of n_instructions. A jump must go forward (its
  // destination past itself, at most one past the end): with no loop, one execute() runs
  // each instruction at most once.
  Status instruction(const fb::Table& t, const fb::Table& plan, uint32_t n_values, uint32_t index,
                     uint32_t n_instructions) {
    KILN_TRY(fb::Union u, fb::union_at(r, t, 0));
    switch (u.type) {
      case schema::kKernelCall:
      case schema::kDelegateCall: {
        KILN_TRY(int32_t target, fb::scalar<int32_t>(r, u.value, 0));
        unsigned slot = u.type == schema::kKernelCall ? schema::kOperators : schema::kDelegates;
        KILN_TRY(fb::Vector targets, fb::vector(r, plan, slot, 4));
        KILN_CHECK(check_index(target, targets.count));
        return index_vector(u.value, 1, n_values, false);
      }
      case schema::kMoveCall:
      case schema::kJumpFalseCall: {
        KILN_TRY(int32_t first, fb::scalar<int32_t>(r, u.value, 0));
        KILN_TRY(int32_t second, fb::scalar<int32_t>(r, u.value, 1));
        KILN_CHECK(check_index(first, n_values));
        KILN_CHECK(check_index(second, u.type == schema::kMoveCall ? n_values : n_instructions + 1));
        if (u.type == schema::kJumpFalseCall && static_cast<uint32_t>(second) <= index) {
          return unsupported(Feature::kBackwardJump, index);
        }
        return {};
      }
      case schema::kFreeCall: {
        KILN_TRY(int32_t index, fb::scalar<int32_t>(r, u.value, 0));
        return check_index(index, n_values);
      }
      default: break;
    }
    return Error{ErrorCode::kPteBadUnion, t.pos, u.type};
  }

  Status stacktrace(const fb::Table& chain, uint32_t n_instructions) {
    KILN_TRY(fb::Vector lists, fb::vector(r, chain, schema::kStacktrace, 4));
    KILN_TRY(uint32_t present, fb::field(r, chain, schema::kStacktrace));
    if (present != 0 && lists.count != n_instructions) return bad_index(lists.count, n_instructions);
    for (uint32_t i = 0; i < lists.count; ++i) {
      KILN_TRY(fb::Table list, fb::element(r, lists, i));
      KILN_TRY(fb::Vector frames, fb::vector(r, list, 0, 4));
      for (uint32_t j = 0; j < frames.count; ++j) {
        KILN_TRY(fb::Table frame, fb::element(r, frames, j));
        KILN_CHECK(fb::string(r, frame, 0));
        KILN_CHECK(fb::scalar<int32_t>(r, frame, 1));
        KILN_CHECK(fb::string(r, frame, 2));
        KILN_CHECK(fb::string(r, frame, 3));
      }
    }
    return {};
  }

  Status chain(const fb::Table& t, const fb::Table& plan, uint32_t n_values) {
    KILN_CHECK(index_vector(t, schema::kChainInputs, n_values, false));
    KILN_CHECK(index_vector(t, schema::kChainOutputs, n_values, false));
    KILN_TRY(fb::Vector instructions, fb::vector(r, t, schema::kInstructions, 4));
    for (uint32_t i = 0; i < instructions.count; ++i) {
      KILN_TRY(fb::Table ins, fb::element(r, instructions, i));
      KILN_CHECK(instruction(ins, plan, n_values, i, instructions.count));
    }
    return stacktrace(t, instructions.count);
  }

  Status delegate(const fb::Table& t) {
    KILN_CHECK(fb::string(r, t, schema::kId));
    KILN_TRY(fb::Table processed, fb::child(r, t, schema::kProcessed));
    if (!processed.present()) return Error{ErrorCode::kPteMissingField, t.pos, schema::kProcessed};
    KILN_TRY(int8_t location, fb::scalar<int8_t>(r, processed, 0));
    KILN_TRY(uint32_t index, fb::scalar<uint32_t>(r, processed, 1));
    if (location == static_cast<int8_t>(DataLocation::kInline)) {
      KILN_CHECK(check_index(index, n_inline));
    } else if (location == static_cast<int8_t>(DataLocation::kSegment)) {
      KILN_CHECK(check_index(index, segments.count));
    } else {
      return Error{ErrorCode::kPteBadEnum, processed.pos, static_cast<uint32_t>(location)};
    }
    KILN_TRY(fb::Vector specs, fb::vector(r, t, schema::kCompileSpecs, 4));
    for (uint32_t i = 0; i < specs.count; ++i) {
      KILN_TRY(fb::Table spec, fb::element(r, specs, i));
      KILN_CHECK(fb::string(r, spec, 0));
      KILN_CHECK(fb::vector(r, spec, 1, 1));
    }
    return {};
  }

  Status tables_each(const fb::Table& plan, unsigned slot, Status (ProgramLoader::*check)(const fb::Table&)) {
    KILN_TRY(fb::Vector v, fb::vector(r, plan, slot, 4));
    for (uint32_t i = 0; i < v.count; ++i) {
      KILN_TRY(fb::Table t, fb::element(r, v, i));
      KILN_CHECK((this->*check)(t));
    }
    return {};
  }

  Status op(const fb::Table& t) {
    KILN_CHECK(fb::string(r, t, 0));
    KILN_CHECK(fb::string(r, t, 1));
    return {};
  }

  Status io_tensors(const fb::Table& plan, const fb::Vector& values, unsigned slot) {
    KILN_TRY(fb::Vector v, fb::vector(r, plan, slot, 4));
    for (uint32_t i = 0; i < v.count; ++i) {
      KILN_TRY(int32_t index, r.read<int32_t>(v.start + 4ull * i));
      KILN_CHECK(check_index(index, values.count));
      KILN_TRY(fb::Table value, fb::element(r, values, static_cast<uint32_t>(index)));
      KILN_TRY(fb::Union u, fb::union_at(r, value, 0));
      if (u.type != static_cast<uint8_t>(ValueKind::kTensor)) return unsupported(Feature::kNonTensorIo, i);
    }
    return {};
  }

  Status plan(const fb::Table& t, bool first) {
    KILN_CHECK(fb::string(r, t, schema::kName));
    KILN_TRY(fb::Table meta, fb::child(r, t, schema::kContainerMetaType));
    if (meta.present()) {
      KILN_CHECK(fb::string(r, meta, 0));
      KILN_CHECK(fb::string(r, meta, 1));
    }
    KILN_TRY(fb::Vector devices, fb::vector(r, t, schema::kNonConstBufferDevice, 4));
    if (devices.count != 0) return unsupported(Feature::kNonConstBufferDevice);
    KILN_TRY(fb::Vector buffer_sizes, fb::vector(r, t, schema::kNonConstBufferSizes, 8));
    KILN_TRY(fb::Vector values, fb::vector(r, t, schema::kValues, 4));
    for (uint32_t i = 0; i < values.count; ++i) {
      KILN_TRY(fb::Table v, fb::element(r, values, i));
      KILN_CHECK(evalue(v, i, values.count, buffer_sizes));
    }
    KILN_CHECK(io_tensors(t, values, schema::kInputs));
    KILN_CHECK(io_tensors(t, values, schema::kOutputs));
    KILN_CHECK(tables_each(t, schema::kOperators, &ProgramLoader::op));
    KILN_CHECK(tables_each(t, schema::kDelegates, &ProgramLoader::delegate));
    KILN_TRY(fb::Vector chains, fb::vector(r, t, schema::kChains, 4));
    if (first && chains.count != 1) return unsupported(Feature::kChains, chains.count);
    for (uint32_t i = 0; i < chains.count; ++i) {
      KILN_TRY(fb::Table c, fb::element(r, chains, i));
      KILN_CHECK(chain(c, t, values.count));
      if (first) p.chain_ = c.pos;
    }
    if (first) {
      p.plan_ = t.pos;
      p.value_count_ = values.count;
    }
    return {};
  }

  Status program() {
    KILN_TRY(uint32_t root, r.read<uint32_t>(0));
    KILN_TRY(fb::Table program, fb::table_at(r, root));
    p.root_ = program.pos;
    KILN_CHECK(fb::scalar<uint32_t>(r, program, schema::kVersion));
    KILN_TRY(fb::Vector mutable_segments, fb::vector(r, program, schema::kMutableDataSegments, 4));
    if (mutable_segments.count != 0) return unsupported(Feature::kMutableDataSegments);
    KILN_CHECK(segment_table(program));
    KILN_CHECK(blobs(program, schema::kBackendDelegateData, &n_inline));
    KILN_CHECK(constants(program));
    KILN_CHECK(named_data(program));
    KILN_TRY(fb::Vector plans, fb::vector(r, program, schema::kExecutionPlan, 4));
    if (plans.count == 0) return unsupported(Feature::kNoExecutionPlan);
    for (uint32_t i = 0; i < plans.count; ++i) {
      KILN_TRY(fb::Table t, fb::element(r, plans, i));
      KILN_CHECK(plan(t, i == 0));
    }
    return {};
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
  ProgramLoader loader{p, {}, {}};
  KILN_CHECK(loader.header());
  loader.r = fb::Reader{p.base_, p.program_size_, 8 * static_cast<int64_t>(p.program_size_) + 4096};
  KILN_CHECK(loader.program());
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
  return TensorInfo{static_cast<ScalarType>(type), {dims, sizes.count}, numel * element_size(type), value_index,
                    numel};
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
