// Bundle: the verification pass over a BundledProgram and its accessors (bundle.h).
#include "bundle.h"

#include <cstring>

// The loader's FlatBuffer verifier, internal to the runtime: by its path from here, which the
// CMake build and the exported csolution (kiln export: the same folders under kiln/) share.
#include "../../runtime/src/fb.h"

namespace kiln::runner {
namespace {

using runtime::Error;
using runtime::ErrorCode;
namespace fb = runtime::fb;

// "BP08" as the little-endian word at offset 4.
constexpr uint32_t kIdentifier = 'B' | ('P' << 8) | ('0' << 16) | (uint32_t{'8'} << 24);

// Field slots of bundled_program_schema.fbs (declaration order; a union takes two).
enum BundleSlot : unsigned { kVersion, kSuites, kProgram };
enum SuiteSlot : unsigned { kMethodName, kCases };
enum ValueSlot : unsigned { kScalarType, kSizes, kData, kDimOrder };  // of a Tensor
// A case's slots: 0 its inputs, 1 its expected outputs (the `expected` flag of the accessors).

void verify_value(fb::Verifier& r, const fb::Table& value) {
  const fb::Union u = r.union_at(value, 0);
  if (!r.ok()) return;
  if (u.type < static_cast<uint8_t>(BundleValueKind::kTensor) ||
      u.type > static_cast<uint8_t>(BundleValueKind::kDouble)) {
    return r.fail(Error{ErrorCode::kPteBadUnion, value.pos, u.type});
  }
  if (u.type == static_cast<uint8_t>(BundleValueKind::kTensor)) {
    r.scalar<int8_t>(u.value, kScalarType);
    r.vector(u.value, kSizes, 4);
    r.vector(u.value, kData, 1);
    r.vector(u.value, kDimOrder, 1);
  } else {
    r.scalar<int64_t>(u.value, 0);  // Int, Bool and Double hold one scalar, 8 bytes at most
  }
}

}  // namespace

bool Bundle::is_bundle(const uint8_t* data, size_t size) {
  if (data == nullptr || size < 8) return false;
  uint32_t word;
  std::memcpy(&word, data + 4, 4);
  return word == kIdentifier;
}

runtime::Result<Bundle> Bundle::load(const uint8_t* data, size_t size) {
  if (size < 8) return Error{ErrorCode::kPteTooShort, static_cast<uint32_t>(size), 8};
  if (size > UINT32_MAX) return Error{ErrorCode::kTooLarge, 0xFFFFFFFFu, 0xFFFFFFFFu};
  if (!is_bundle(data, size)) {
    uint32_t word;
    std::memcpy(&word, data + 4, 4);
    return Error{ErrorCode::kPteBadIdentifier, word, kIdentifier};
  }
  const uint32_t n = static_cast<uint32_t>(size);
  fb::Verifier r(data, n, 8 * static_cast<int64_t>(n) + 4096);
  const fb::Table root = r.table(r.read<uint32_t>(0));
  const fb::Vector suites = r.vector(root, kSuites, 4);
  for (uint32_t s = 0; s < suites.count && r.ok(); ++s) {
    const fb::Table suite = r.element(suites, s);
    r.string(suite, kMethodName);
    const fb::Vector cases = r.vector(suite, kCases, 4);
    for (uint32_t c = 0; c < cases.count && r.ok(); ++c) {
      const fb::Table test_case = r.element(cases, c);
      for (unsigned side = 0; side < 2; ++side) {
        const fb::Vector values = r.vector(test_case, side, 4);
        for (uint32_t i = 0; i < values.count && r.ok(); ++i) verify_value(r, r.element(values, i));
      }
    }
  }
  const fb::Vector program = r.vector(root, kProgram, 1);
  if (!r.ok()) return r.error();
  if (program.count == 0) return Error{ErrorCode::kPteMissingField, root.pos, kProgram};
  Bundle b;
  b.base_ = data;
  b.size_ = n;
  b.root_ = root.pos;
  return b;
}

runtime::Span<const uint8_t> Bundle::program() const {
  const fb::Verified v(base_, size_);
  return v.bytes(v.table(root_), kProgram);
}

uint32_t Bundle::suite_count() const {
  const fb::Verified v(base_, size_);
  return v.vector(v.table(root_), kSuites, 4).count;
}

runtime::StringView Bundle::method_name(uint32_t suite) const {
  const fb::Verified v(base_, size_);
  return v.string(v.element(v.vector(v.table(root_), kSuites, 4), suite), kMethodName);
}

uint32_t Bundle::case_count(uint32_t suite) const {
  const fb::Verified v(base_, size_);
  return v.vector(v.element(v.vector(v.table(root_), kSuites, 4), suite), kCases, 4).count;
}

namespace {

fb::Vector case_values(const fb::Verified& v, uint32_t root, uint32_t suite, uint32_t c, bool expected) {
  const fb::Table s = v.element(v.vector(v.table(root), kSuites, 4), suite);
  return v.vector(v.element(v.vector(s, kCases, 4), c), expected ? 1 : 0, 4);
}

}  // namespace

uint32_t Bundle::value_count(uint32_t suite, uint32_t c, bool expected) const {
  return case_values(fb::Verified(base_, size_), root_, suite, c, expected).count;
}

BundleValue Bundle::value(uint32_t suite, uint32_t c, bool expected, uint32_t i) const {
  const fb::Verified v(base_, size_);
  const fb::Union u = v.union_at(v.element(case_values(v, root_, suite, c, expected), i));
  BundleValue out{static_cast<BundleValueKind>(u.type), 0, {}, {}, {}};
  if (out.kind == BundleValueKind::kTensor) {
    out.type = v.scalar<int8_t>(u.value, kScalarType);
    const fb::Vector sizes = v.vector(u.value, kSizes, 4);
    out.sizes = {static_cast<const int32_t*>(v.pointer(sizes.start)), sizes.count};
    out.data = v.bytes(u.value, kData);
    out.dim_order = v.bytes(u.value, kDimOrder);
  }
  return out;
}

}  // namespace kiln::runner
