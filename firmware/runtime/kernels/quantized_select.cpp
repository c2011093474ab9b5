// Integer cortex_m kernels that select or look up int8 values, as
// kiln.program.kernels.integer_select computes them (ExecuTorch's schemas):
//   cortex_m::quantized_max_pool2d.out (input, kernel_size, stride, padding, dilation,
//     ceil_mode, input_zero_point, output_zero_point, activation_min, activation_max, out):
//     aten::max_pool2d's windows on an NCHW int8 tensor (pool_max.cpp), clamped to the
//     activation range; the zero points must be equal.
//   cortex_m::minimum.out, cortex_m::maximum.out (self, other, out): int8 tensors, numpy
//     broadcasting (elementwise.cpp's aten::minimum and aten::maximum).
//   cortex_m::transpose.out (input, perm, out): permute_copy (movement.cpp) of int8 or int16.
//   cortex_m::quantized_activation.out (input, lut, out): out[i] = lut[input[i] + 128], lut
//     an int8 tensor of 256 entries.
// Every tensor but the lut in either DimOrder, each its own (ExecuTorch's Cortex-M flow mixes
// them); max pooling's input and out 4-D for channels-last.
#include "elementwise.h"
#include "kiln/runtime/try.h"
#include "movement.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

// The aten kernels these take their work from (declared by the generated kernel table).
Status minimum_out(KernelArgs& args);
Status maximum_out(KernelArgs& args);
Status permute_copy_out(KernelArgs& args);

namespace {

constexpr uint32_t kLutSize = 256;

// Arguments 0 .. count - 1 are int8 tensors in either DimOrder (data checked as input_tensor does).
Status int8_tensors(const KernelArgs& args, size_t count) {
  for (size_t i = 0; i < count; ++i) KILN_CHECK(input_tensor_any_order(args, i, ScalarType::kChar));
  return {};
}

}  // namespace

Status cortex_m_quantized_max_pool2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 10));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  if (x->dim != 4) return unsupported(0, x->dim);
  KILN_TRY(int64_t input_zp, ranged_int(args, 6, INT8_MIN, INT8_MAX));
  KILN_CHECK(ranged_int(args, 7, input_zp, input_zp));
  int32_t range[2];
  KILN_CHECK(activation_range(args, 8, 9, range));
  return max_pool2d(args, 10, range);
}

Status cortex_m_minimum_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_CHECK(int8_tensors(args, 2));
  return minimum_out(args);
}

Status cortex_m_maximum_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_CHECK(int8_tensors(args, 2));
  return maximum_out(args);
}

Status cortex_m_transpose_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  if (args[0].kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(args[0].kind));
  const ScalarType type = args[0].t.type;
  if (type != ScalarType::kChar && type != ScalarType::kShort) return bad_argument(0, static_cast<uint32_t>(type));
  return permute_copy_out(args);
}

Status cortex_m_quantized_activation_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* lut, input_tensor(args, 1, ScalarType::kChar));
  if (lut->numel != kLutSize) return shape_mismatch(1, lut->numel);
  KILN_TRY(Tensor * out, output_tensor_any_order(args, 2, ScalarType::kChar));
  if (!same_sizes(*out, *x)) return shape_mismatch(2);
  const int8_t* table = s8(*lut);
  const int8_t* in = s8(*x);
  int8_t* y = s8(*out);
  if (x->order == out->order) {  // the same element at the same place
    for (uint32_t i = 0; i < x->numel; ++i) y[i] = table[in[i] + 128];
    return {};
  }
  const size_t dims[1] = {x->dim};
  const int32_t* const sizes[1] = {x->sizes};
  const DimOrder orders[1] = {x->order};
  for_each_broadcast(*out, dims, sizes, orders, [&](uint32_t i, const uint32_t* at) { y[i] = table[in[at[0]] + 128]; });
  return {};
}

}  // namespace kiln::runtime::kernels
