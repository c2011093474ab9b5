// ExecuTorch's BundledProgram (.bpte, file identifier "BP08"), read in place: the program (the
// whole .pte) and per method a suite of test cases, each its inputs and the outputs they must
// give. The schema's facts are kiln.pte.bundle's (compiler/kiln/pte/bundle.py):
//
//   BundledProgram         { version: uint; method_test_suites: [Suite]; program: [ubyte] }
//   BundledMethodTestSuite { method_name: string; test_cases: [Case] }
//   BundledMethodTestCase  { inputs: [Value]; expected_outputs: [Value] }
//   Value                  { val: union { Tensor = 1, Int = 2, Bool = 3, Double = 4 } }
//   Tensor                 { scalar_type: byte; sizes: [int]; data: [ubyte]; dim_order: [ubyte] }
//
// Bundle::load verifies every table, vector, string and union of the bundle once, with the
// .pte loader's verifier (runtime/src/fb.h: its kPte* errors, offsets counted from the
// bundle's start, and its work budget of 8 n + 4096 reads for n bytes); the accessors then
// read verified data. The program inside is not read here: Program::load verifies it.
// Ownership: a Bundle points into the bundle's bytes, which must outlive it and everything
// read from it. The bytes must be 16-byte aligned for the program to be (the program vector
// is 32-byte aligned within the file: ExecuTorch's force_align).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runner {

// ValueUnion's type codes.
enum class BundleValueKind : uint8_t { kTensor = 1, kInt = 2, kBool = 3, kDouble = 4 };

// One value of a case. For a tensor: its type code (not checked against ScalarType: the
// runner compares it with the method's), sizes, bytes and dim order (its bytes laid out in
// it; none: contiguous), inside the bundle.
struct BundleValue {
  BundleValueKind kind;
  int8_t type;
  runtime::Span<const int32_t> sizes;
  runtime::Span<const uint8_t> data;
  runtime::Span<const uint8_t> dim_order;
};

class Bundle {
 public:
  Bundle() = default;

  // Whether `size` bytes at `data` carry the bundle's identifier ("BP08" at offset 4).
  static bool is_bundle(const uint8_t* data, size_t size);
  // Verifies the bundle (see the header comment): the loader's kPte* errors; kPteBadIdentifier
  // (a = the word found, b = "BP08") when it is not one; kPteMissingField (a = the root's
  // offset, b = the program's slot) when it holds no program.
  static runtime::Result<Bundle> load(const uint8_t* data, size_t size);

  runtime::Span<const uint8_t> program() const;  // the .pte inside
  uint32_t suite_count() const;
  runtime::StringView method_name(uint32_t suite) const;  // empty when absent
  uint32_t case_count(uint32_t suite) const;
  // The inputs (expected = false) or expected outputs of case `c` of `suite`: their count and
  // value i (i < count; a value of kind 0 otherwise).
  uint32_t value_count(uint32_t suite, uint32_t c, bool expected) const;
  BundleValue value(uint32_t suite, uint32_t c, bool expected, uint32_t i) const;

 private:
  const uint8_t* base_ = nullptr;
  uint32_t size_ = 0;
  uint32_t root_ = 0;
};

}  // namespace kiln::runner
