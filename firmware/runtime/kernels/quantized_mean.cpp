// kiln's integer cortex_m kernels of the mean and the int16 product, as
// kiln.program.kernels.integer_s16 computes them:
//   cortex_m::quantized_mean.out (input, dim, keepdim, input_zero_point, output_zero_point,
//     multiplier, shift, out): int8 or int16 input and out tensor of one type, contiguous; dim
//     names the input's trailing dims (each once, at least one, at most 2^15 values in all).
//     Each run of those values: (sum - count input_zero_point) multiplier, plus 2^(t - 1),
//     shifted right by t = 31 - shift (within [1, 62]: one rounding, halves up), plus
//     output_zero_point, clamped to the type. |sum - count zp| < 2^31 and multiplier < 2^31: the
//     product stays within int64.
//   cortex_m::quantized_mul_s16.out (self, other, output_multiplier, output_shift,
//     activation_min, activation_max, out): arm_elementwise_mul_s16: requantize(a b) (fixed_point.h;
//     the product of two int16 within 2^30, shift within [-31, 0]) clamped to the activation
//     range (int16 values); numpy broadcasting.
#include "elementwise.h"
#include "kiln/runtime/try.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxCount = int64_t{1} << 15;

template <typename T>
void mean_rows(const T* x, T* y, int64_t rows, int64_t count, int64_t input_zp, int64_t output_zp, int64_t multiplier,
               int32_t total, int64_t low, int64_t high) {
  const auto n = static_cast<ptrdiff_t>(count);
  for (int64_t r = 0; r < rows; ++r, x += n) {
    int32_t sum = 0;  // at most 2^15 values below 2^15
    for (ptrdiff_t i = 0; i < n; ++i) sum += x[i];
    const int64_t centred = sum - count * input_zp;
    const int64_t v = ((centred * multiplier + (int64_t{1} << (total - 1))) >> total) + output_zp;
    *y++ = static_cast<T>(v < low ? low : (v > high ? high : v));
  }
}

}  // namespace

Status cortex_m_quantized_mean_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  if (args[0].kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(args[0].kind));
  const ScalarType type = args[0].t.type;
  if (type != ScalarType::kChar && type != ScalarType::kShort) return bad_argument(0, static_cast<uint32_t>(type));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, type));
  const bool s16 = type == ScalarType::kShort;
  const int64_t low = s16 ? INT16_MIN : INT8_MIN, high = s16 ? INT16_MAX : INT8_MAX;
  if (x->dim == 0) return unsupported(0);
  int64_t dims[kMaxDims];
  size_t reduced = 0;
  KILN_CHECK(int_list_arg(args, 1, dims, kMaxDims, &reduced));
  if (reduced == 0 || reduced > x->dim) return unsupported(1);
  bool seen[kMaxDims] = {};
  for (size_t k = 0; k < reduced; ++k) {
    KILN_TRY(size_t d, dim_index(dims[k], x->dim, 1));
    if (seen[d] || d < x->dim - reduced)
      return unsupported(1, static_cast<uint32_t>(k));  // the trailing dims, once each
    seen[d] = true;
  }
  KILN_TRY(bool keepdim, bool_arg(args, 2));
  KILN_TRY(int64_t input_zp, ranged_int(args, 3, low, high));
  KILN_TRY(int64_t output_zp, ranged_int(args, 4, low, high));
  KILN_TRY(int64_t multiplier, ranged_int(args, 5, 0, INT32_MAX));
  KILN_TRY(int64_t shift, ranged_int(args, 6, -31, 30));
  const size_t lead = x->dim - reduced;
  KILN_TRY(int64_t count, size_product(*x, lead, x->dim, 0));
  if (count < 1 || count > kMaxCount) return unsupported(0);
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d < x->dim; ++d) sizes[d] = d < lead ? x->sizes[d] : 1;
  KILN_TRY(Tensor * out, output_tensor(args, 7, type));
  KILN_CHECK(expect_sizes(*out, sizes, keepdim ? x->dim : lead, 7));
  const int64_t rows = x->numel / count;
  const auto total = static_cast<int32_t>(31 - shift);
  if (s16) {
    mean_rows(static_cast<const int16_t*>(x->data), static_cast<int16_t*>(out->data), rows, count, input_zp, output_zp,
              multiplier, total, low, high);
  } else {
    mean_rows(s8(*x), s8(*out), rows, count, input_zp, output_zp, multiplier, total, low, high);
  }
  return {};
}

Status cortex_m_quantized_mul_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 6));
  KILN_TRY(const Tensor* a, input_tensor(args, 0, ScalarType::kShort));
  KILN_TRY(const Tensor* b, input_tensor(args, 1, ScalarType::kShort));
  KILN_TRY(int64_t multiplier, ranged_int(args, 2, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t shift, ranged_int(args, 3, -31, 0));
  int32_t range[2];
  KILN_CHECK(activation_range_s16(args, 4, 5, range));
  KILN_TRY(Tensor * out, output_tensor(args, 6, ScalarType::kShort));
  const size_t dims[2] = {a->dim, b->dim};
  const int32_t* const sizes[2] = {a->sizes, b->sizes};
  KILN_CHECK(check_broadcast(*out, 6, dims, sizes, 2));
  const auto *x = static_cast<const int16_t*>(a->data), *y = static_cast<const int16_t*>(b->data);
  auto* z = static_cast<int16_t*>(out->data);
  const DimOrder orders[2] = {a->order, b->order};
  for_each_broadcast(*out, dims, sizes, orders, [&](uint32_t i, const uint32_t* at) {
    const int32_t product = static_cast<int32_t>(x[at[0]]) * y[at[1]];  // |product| <= 2^30
    const int32_t v = fixed::requantize(product, static_cast<int32_t>(multiplier), static_cast<int32_t>(shift));
    z[i] = static_cast<int16_t>(v < range[0] ? range[0] : (v > range[1] ? range[1] : v));
  });
  return {};
}

}  // namespace kiln::runtime::kernels
