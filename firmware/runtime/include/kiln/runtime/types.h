// Values a method binds and kernels/backends see: scalar types, tensors, EValues.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/span.h"

namespace kiln::runtime {

// ExecuTorch's ScalarType codes (schema/scalar_type.fbs).
enum class ScalarType : int8_t {
  kByte = 0,
  kChar = 1,
  kShort = 2,
  kInt = 3,
  kLong = 4,
  kHalf = 5,
  kFloat = 6,
  kDouble = 7,
  kBool = 11,
  kQInt8 = 12,
  kQUInt8 = 13,
  kQInt32 = 14,
  kBFloat16 = 15,
  kQUInt4x2 = 16,
  kQUInt2x4 = 17,
  kBits16 = 22,
  kFloat8e5m2 = 23,
  kFloat8e4m3fn = 24,
  kFloat8e5m2fnuz = 25,
  kFloat8e4m3fnuz = 26,
  kUInt16 = 27,
  kUInt32 = 28,
  kUInt64 = 29,
};

// Bytes per element of `type`; 0 for a code that is not a ScalarType.
size_t element_size(int8_t type);

constexpr size_t kMaxDims = 8;  // the loader rejects tensors with more dimensions

// How a tensor's elements lie in memory, from the .pte's dim_order (the loader refuses every
// other order):
//   kContiguous    row-major in the order of `sizes` (dim_order 0, 1, .., n - 1), as kiln and
//                  ExecuTorch's Ethos-U flow write every tensor;
//   kChannelsLast  a 4-D tensor of sizes N, C, H, W stored N, H, W, C (dim_order 0, 2, 3, 1),
//                  as ExecuTorch's Cortex-M flow writes activations.
// A dim_order that is one of these two once its dims of size 1 are left out (ExecuTorch writes
// 0, 2, 1, 3 for a 1x1xHxW input) is that one: the same bytes.
enum class DimOrder : uint8_t { kContiguous = 0, kChannelsLast = 1 };

// The DimOrder of `dim_order` (`dim` entries) for a tensor of `sizes`; false when it is neither.
bool dim_order_of(const int32_t* sizes, const uint8_t* dim_order, size_t dim, DimOrder* order);

// Where the element at row-major (contiguous) index k of a tensor of `sizes` (`dim` of them;
// 4 for kChannelsLast) lies in memory laid out in `order`; k < the product of the sizes.
uint32_t element_index(DimOrder order, const int32_t* sizes, size_t dim, uint32_t k);

// A tensor as bound by a Method, dense in its dim order (`order`).
// `sizes` points into the .pte (valid while the .pte bytes are); `data` points into
// a planned buffer, the .pte's constant data (then `constant` is true and the bytes
// must not be written), or memory the app supplied with Method::set_input; nullptr
// until then. numel * element_size(type) == nbytes, checked at load (no overflow).
struct Tensor {
  ScalarType type;
  uint8_t dim;
  bool constant;
  DimOrder order;
  const int32_t* sizes;
  void* data;
  uint32_t numel;
  uint32_t nbytes;
};

// EValue kinds: the codes of program.fbs's KernelTypes union.
enum class ValueKind : uint8_t {
  kNone = 0,
  kNull = 1,
  kInt = 2,
  kBool = 3,
  kDouble = 4,
  kTensor = 5,
  kString = 6,
  kIntList = 7,
  kDoubleList = 8,
  kBoolList = 9,
  kTensorList = 10,
  kOptionalTensorList = 11,
};

// A list inside the .pte: `items` points at `count` elements, aligned to their size:
// int64 value indices (IntList: each an Int value, checked at bind time), doubles
// (DoubleList), bytes (BoolList), int32 value indices (TensorList;
// OptionalTensorList with -1 for None).
struct ListRef {
  const void* items;
  uint32_t count;
};

// One bound value. Only the member named by `kind` is meaningful.
struct Value {
  Value() : kind(ValueKind::kNone), i(0) {}
  ValueKind kind;
  union {
    int64_t i;       // kInt
    double d;        // kDouble
    bool b;          // kBool
    Tensor t;        // kTensor
    ListRef list;    // the list kinds
    StringView s;    // kString (points into the .pte)
  };
};

}  // namespace kiln::runtime
