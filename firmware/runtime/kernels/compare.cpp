// Comparisons, where and logical ops; bool tensors are ScalarType Bool, one byte each
// (read: nonzero is true; written: 0 or 1). Broadcasting as numpy's (elementwise.h).
//   aten::{eq,ne,lt,le,gt,ge}.Tensor_out (self, other) and .Scalar_out (self, number):
//     float32, integer or bool operands of one type (a number takes it: an Int for integer
//     tensors, none for bools; false < true), bool out; NaN compares unequal to everything
//   aten::where.self_out (condition, self, other): condition bool; self, other and out of one
//     type (float32, an integer type or bool); condition ? self : other
//   aten::logical_not.out (self), logical_and.out / logical_or.out (self, other): bool
#include "elementwise.h"

namespace kiln::runtime::kernels {

namespace {

template <typename Compare>
Status compare(KernelArgs& args, Compare c) {
  return numeric_binary<true>(args, 2, c);
}

template <typename T>
Status where_typed(KernelArgs& args) {
  KILN_TRY(Operand<uint8_t> cond, operand<uint8_t>(args, 0));
  KILN_TRY(Operand<T> a, operand<T>(args, 1));
  KILN_TRY(Operand<T> b, operand<T>(args, 2));
  KILN_TRY(Tensor * out, output_tensor_any_order(args, 3, scalar_type_of<T>()));
  const size_t dims[3] = {cond.dim, a.dim, b.dim};
  const int32_t* const sizes[3] = {cond.sizes, a.sizes, b.sizes};
  const DimOrder orders[3] = {cond.order, a.order, b.order};
  KILN_CHECK(check_broadcast(*out, 3, dims, sizes, 3));
  T* y = elements<T>(*out);
  for_each_broadcast(*out, dims, sizes, orders,
                     [&](uint32_t i, const uint32_t* at) { y[i] = cond.at(at[0]) != 0 ? a.at(at[1]) : b.at(at[2]); });
  return {};
}

}  // namespace

Status eq_tensor_out(KernelArgs& args) {
  return compare(args, [](auto a, auto b) { return a == b; });
}
Status ne_tensor_out(KernelArgs& args) {
  return compare(args, [](auto a, auto b) { return a != b; });
}
Status lt_tensor_out(KernelArgs& args) {
  return compare(args, [](auto a, auto b) { return a < b; });
}
Status le_tensor_out(KernelArgs& args) {
  return compare(args, [](auto a, auto b) { return a <= b; });
}
Status gt_tensor_out(KernelArgs& args) {
  return compare(args, [](auto a, auto b) { return a > b; });
}
Status ge_tensor_out(KernelArgs& args) {
  return compare(args, [](auto a, auto b) { return a >= b; });
}
// The Scalar overloads differ only in that `other` is a number, which operand() reads.
Status eq_scalar_out(KernelArgs& args) { return eq_tensor_out(args); }
Status ne_scalar_out(KernelArgs& args) { return ne_tensor_out(args); }
Status lt_scalar_out(KernelArgs& args) { return lt_tensor_out(args); }
Status le_scalar_out(KernelArgs& args) { return le_tensor_out(args); }
Status gt_scalar_out(KernelArgs& args) { return gt_tensor_out(args); }
Status ge_scalar_out(KernelArgs& args) { return ge_tensor_out(args); }

Status where_self_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(ScalarType type, tensor_type(args, 1, 2));
  return with_element_type<true>(type, 1, [&](auto zero) { return where_typed<decltype(zero)>(args); });
}

Status logical_not_out(KernelArgs& args) {
  return map<uint8_t, uint8_t>(args, 1, [](uint8_t x) -> uint8_t { return x == 0; });
}

Status logical_and_out(KernelArgs& args) {
  return binary<uint8_t, uint8_t>(args, 2, [](uint8_t a, uint8_t b) -> uint8_t { return a != 0 && b != 0; });
}

Status logical_or_out(KernelArgs& args) {
  return binary<uint8_t, uint8_t>(args, 2, [](uint8_t a, uint8_t b) -> uint8_t { return a != 0 || b != 0; });
}

}  // namespace kiln::runtime::kernels
