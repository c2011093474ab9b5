// Integer cortex_m kernels of int8 values that requantize them, as
// kiln.program.kernels.integer computes them (CMSIS-NN's arithmetic; fixed_point.h):
//   cortex_m::quantized_mul.out (self, self_zero_point, other, other_zero_point,
//     output_zero_point, output_multiplier, output_shift, out): ExecuTorch's schema;
//     requantize((a - zp_a)(b - zp_b) mod 2^32, ..) + zp_out clamped to int8
//     (arm_elementwise_mul_s8; the zero points any int32),
//     operands broadcast as numpy's, each tensor in its own DimOrder (ExecuTorch's Cortex-M flow
//     mixes them).
//   cortex_m::quantized_div.out (self, self_zero_point, other, other_zero_point,
//     output_zero_point, output_scale, out): ExecuTorch's (no CMSIS-NN function); int8 or int16
//     operands of one shape, rint(float(a - zp_a) / float(b - zp_b) * float(output_scale)) +
//     zp_out in float32 (the quotient 0 where b - zp_b is 0), clamped to the operands' type; each
//     tensor in its own DimOrder.
//   cortex_m::quantized_cat.out (tensors, dim, zero_points, multipliers, shifts,
//     output_zero_point, out): kiln's; the int8 tensors joined along dim, value q of tensor k
//     written as requantize(q - zero_points[k], multipliers[k], shifts[k]) + output_zero_point
//     clamped to int8.
#include <cmath>

#include "elementwise.h"
#include "kiln/runtime/try.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

namespace {

const int32_t kInt8Range[2] = {INT8_MIN, INT8_MAX};

}  // namespace

Status cortex_m_quantized_mul_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  KILN_TRY(const Tensor* a, input_tensor_any_order(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* b, input_tensor_any_order(args, 2, ScalarType::kChar));
  KILN_TRY(int64_t a_zp, ranged_int(args, 1, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t b_zp, ranged_int(args, 3, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t out_zp, ranged_int(args, 4, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t multiplier, ranged_int(args, 5, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t shift, ranged_int(args, 6, -31, 31));
  KILN_TRY(Tensor * out, output_tensor_any_order(args, 7, ScalarType::kChar));
  const size_t dims[2] = {a->dim, b->dim};
  const int32_t* const sizes[2] = {a->sizes, b->sizes};
  const DimOrder orders[2] = {a->order, b->order};
  KILN_CHECK(check_broadcast(*out, 7, dims, sizes, 2));
  const int8_t *x = s8(*a), *y = s8(*b);
  int8_t* z = s8(*out);
  for_each_broadcast(*out, dims, sizes, orders, [&](uint32_t i, const uint32_t* at) {
    // The product mod 2^32 (a zero point may lie outside int8: ExecuTorch's hardswish shifts one).
    const auto product =
        static_cast<int32_t>(static_cast<uint32_t>(x[at[0]] - a_zp) * static_cast<uint32_t>(y[at[1]] - b_zp));
    const int32_t v = fixed::requantize(product, static_cast<int32_t>(multiplier), static_cast<int32_t>(shift));
    z[i] = clamp_to(v + out_zp, kInt8Range);
  });
  return {};
}

namespace {

template <typename T>
Status quantized_div(KernelArgs& args, const Tensor& a, const Tensor& b) {
  constexpr int32_t kLow = std::is_same_v<T, int8_t> ? INT8_MIN : INT16_MIN;
  constexpr int32_t kHigh = std::is_same_v<T, int8_t> ? INT8_MAX : INT16_MAX;
  KILN_TRY(int64_t a_zp, ranged_int(args, 1, kLow, kHigh));
  KILN_TRY(int64_t b_zp, ranged_int(args, 3, kLow, kHigh));
  KILN_TRY(int64_t out_zp, ranged_int(args, 4, kLow, kHigh));
  KILN_TRY(double scale_arg, number_arg(args, 5));
  const auto scale = static_cast<float>(scale_arg);
  if (!std::isfinite(scale)) return unsupported(5);
  KILN_TRY(Tensor * out, output_tensor_any_order(args, 6, a.type));
  if (!same_sizes(*out, a)) return shape_mismatch(6);
  const T *x = elements<T>(a), *y = elements<T>(b);
  T* z = elements<T>(*out);
  const auto zero = static_cast<float>(out_zp);
  const auto divide = [&](T p, T q) {
    // |p - zp| < 2^17: exact in float32.
    const auto num = static_cast<float>(p - a_zp), den = static_cast<float>(q - b_zp);
    const float quotient = den != 0.0f ? num / den : 0.0f;
    const float v = std::rint(quotient * scale) + zero;  // finite: |quotient| <= 2^17
    return static_cast<T>(v < kLow ? kLow : (v > kHigh ? kHigh : v));
  };
  const size_t dims[2] = {a.dim, b.dim};
  const int32_t* const sizes[2] = {a.sizes, b.sizes};
  const DimOrder orders[2] = {a.order, b.order};
  for_each_broadcast(*out, dims, sizes, orders,
                     [&](uint32_t i, const uint32_t* at) { z[i] = divide(x[at[0]], y[at[1]]); });
  return {};
}

}  // namespace

Status cortex_m_quantized_div_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 6));
  if (args[0].kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(args[0].kind));
  const ScalarType type = args[0].t.type;
  if (type != ScalarType::kChar && type != ScalarType::kShort) return bad_argument(0, static_cast<uint32_t>(type));
  KILN_TRY(const Tensor* a, input_tensor_any_order(args, 0, type));
  KILN_TRY(const Tensor* b, input_tensor_any_order(args, 2, type));
  if (!same_sizes(*a, *b)) return shape_mismatch(2);
  if (type == ScalarType::kChar) return quantized_div<int8_t>(args, *a, *b);
  return quantized_div<int16_t>(args, *a, *b);
}

Status cortex_m_quantized_cat_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 6));
  const Value& list = args[0];
  if (list.kind != ValueKind::kTensorList || list.list.count == 0) return bad_argument(0);
  const size_t count = list.list.count;
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  for (size_t at = 2; at <= 4; ++at) {
    if (args[at].kind != ValueKind::kIntList) return bad_argument(at, static_cast<uint32_t>(args[at].kind));
    if (args[at].list.count != count) return shape_mismatch(at, static_cast<uint32_t>(args[at].list.count));
  }
  KILN_TRY(int64_t out_zp, ranged_int(args, 5, INT32_MIN, INT32_MAX));
  KILN_TRY(Tensor * out, output_tensor(args, 6, ScalarType::kChar));
  KILN_TRY(size_t dim, dim_index(dim_arg, out->dim, 1));
  int64_t total = 0;
  for (size_t k = 0; k < count; ++k) {
    const Tensor& t = args.tensor_item(list, k);
    if (t.type != ScalarType::kChar || (t.data == nullptr && t.nbytes != 0))
      return bad_argument(0, static_cast<uint32_t>(k));
    if (t.dim != out->dim || t.data == out->data) return shape_mismatch(0, static_cast<uint32_t>(k));
    for (size_t d = 0; d < out->dim; ++d) {
      if (d != dim && t.sizes[d] != out->sizes[d]) return shape_mismatch(0, static_cast<uint32_t>(k));
    }
    KILN_TRY(total, checked_add(total, t.sizes[dim], 0));
    const int64_t zp = args.int_item(args[2], k), m = args.int_item(args[3], k), s = args.int_item(args[4], k);
    if (zp < INT8_MIN || zp > INT8_MAX) return unsupported(2, static_cast<uint32_t>(k));
    if (m < INT32_MIN || m > INT32_MAX) return unsupported(3, static_cast<uint32_t>(k));
    if (s < -31 || s > 31) return unsupported(4, static_cast<uint32_t>(k));
  }
  if (total != out->sizes[dim]) return shape_mismatch(6, static_cast<uint32_t>(dim));
  if (out->numel == 0) return {};
  // out is `outer` rows, each the inputs' rows (sizes[dim] * inner elements) side by side.
  KILN_TRY(const int64_t outer, size_product(*out, 0, dim, 6));
  KILN_TRY(const int64_t inner, size_product(*out, dim + 1, out->dim, 6));
  int8_t* dst = s8(*out);
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < count; ++k) {
      const Tensor& t = args.tensor_item(list, k);
      const int64_t run = t.sizes[dim] * inner;  // <= t.numel (rows of t)
      const int8_t* src = s8(t) + o * run;
      const auto zp = static_cast<int32_t>(args.int_item(args[2], k));
      const auto m = static_cast<int32_t>(args.int_item(args[3], k));
      const auto s = static_cast<int32_t>(args.int_item(args[4], k));
      // |q - zp| <= 255, so the requantize's left shift wraps as the reference's does.
      for (int64_t i = 0; i < run; ++i) *dst++ = clamp_to(fixed::requantize(src[i] - zp, m, s) + out_zp, kInt8Range);
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
