// Integer cortex_m kernels of int16 activations with CMSIS-NN's s16 conventions (zero points 0),
// kiln's names, as kiln.program.kernels.integer computes them (fixed_point.h):
//   cortex_m::softmax_s16.out (input, dim, input_multiplier, input_shift, exp_lut,
//     one_by_one_lut, out): arm_softmax_s16 along the last dim (rows of at most 2^16): each
//     difference from the row's max requantized and offset into [-32768, 32767], its exponential
//     interpolated in exp_lut, the row's sum normalized and its reciprocal interpolated in
//     one_by_one_lut (both int16 tensors of 513 entries); output scale 1/32768, zero point 0.
//     Every int16_t step of CMSIS-NN's C wraps here as it does there.
//   cortex_m::quantized_add_s16.out (self, self_multiplier, self_shift, other, other_multiplier,
//     other_shift, output_multiplier, output_shift, activation_min, activation_max, out):
//     arm_elementwise_add_s16: operands of one shape, each << 15 and requantized, their sum
//     requantized and clamped to the activation range (int16 values).
//   cortex_m::quantized_linear_s16.out (input, weights, bias?, requantize_multipliers,
//     requantize_shifts, activation_max, activation_min, out): arm_fully_connected_s16: int16
//     input [.., in], int8 weights [out, in], an int64 bias; each output's sum of products plus
//     bias (within 2^40) exact in int64 (inputs of at most 2^16 features), requantize_s64 with its multiplier
//     and shift (IntLists of 1 or `out` items; shifts within [-31, 14]), clamped.
#include "kiln/runtime/try.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

namespace {

constexpr uint32_t kLutSize = 513;
constexpr int32_t kAddLeftShift = 15;
constexpr int64_t kMaxBias = int64_t{1} << 40;  // with the products, a sum within requantize_s64's 2^47
constexpr int64_t kMaxRow = int64_t{1} << 16;  // int16 exponentials of a row sum below 2^31

inline int16_t wrap16(int32_t v) { return static_cast<int16_t>(static_cast<uint16_t>(static_cast<uint32_t>(v))); }

// The table's value at v: entry 256 + v / 128, plus its slope to the next times the remainder.
int16_t interpolate(const int16_t* table, int16_t v) {
  const int32_t index = 256 + (v >> 7), offset = v & 0x7F;
  const int16_t slope = wrap16(table[index + 1] - table[index]);
  return wrap16(table[index] + wrap16((slope * offset + 64) >> 7));
}

// False, y partly written, when the row's exponentials (exp_lut's values) do not sum to within
// [2, 2^31): not a softmax table's (whose largest exponential, the max's, is 32767), and the
// normalization's shifts would leave their range.
bool softmax_s16_row(const int16_t* x, int16_t* y, int64_t size, int32_t multiplier, int32_t shift,
                     const int16_t* exp_lut, const int16_t* one_by_one_lut) {
  int32_t max = INT16_MIN;
  for (int64_t i = 0; i < size; ++i) max = x[i] > max ? x[i] : max;
  int32_t sum = 0;  // at most 2^16 values below 2^15
  for (int64_t i = 0; i < size; ++i) {
    const int32_t scaled = fixed::requantize(x[i] - max, multiplier, shift) + INT16_MAX;
    y[i] = interpolate(
        exp_lut, static_cast<int16_t>(scaled < INT16_MIN ? INT16_MIN : (scaled > INT16_MAX ? INT16_MAX : scaled)));
    sum += y[i];
  }
  if (sum < 2) return false;
  const int32_t headroom = fixed::count_leading_zeros(static_cast<uint32_t>(sum));  // 1 .. 30
  const int32_t shifted = fixed::wrap32((int64_t{sum} << (headroom - 1)) + (1 << 13)) >> 14;
  const int16_t reciprocal = interpolate(one_by_one_lut, wrap16(shifted - 98304));
  for (int64_t i = 0; i < size; ++i) y[i] = wrap16((((y[i] * reciprocal) >> (30 - headroom)) + 1) >> 1);
  return true;
}

}  // namespace

Status cortex_m_softmax_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 6));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kShort));
  if (x->dim == 0) return unsupported(0);
  KILN_TRY(int64_t dim, int_arg(args, 1));
  if (dim != -1 && dim != static_cast<int64_t>(x->dim) - 1) return unsupported(1);
  KILN_TRY(int64_t multiplier, ranged_int(args, 2, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t shift, ranged_int(args, 3, -31, 15));  // |difference| < 2^16: shifted, within int32
  KILN_TRY(const Tensor* exp_lut, input_tensor(args, 4, ScalarType::kShort));
  KILN_TRY(const Tensor* one_by_one_lut, input_tensor(args, 5, ScalarType::kShort));
  if (exp_lut->numel != kLutSize) return shape_mismatch(4, exp_lut->numel);
  if (one_by_one_lut->numel != kLutSize) return shape_mismatch(5, one_by_one_lut->numel);
  KILN_TRY(Tensor * out, output_tensor(args, 6, ScalarType::kShort));
  if (!same_sizes(*out, *x)) return shape_mismatch(6);
  const int64_t row = x->sizes[x->dim - 1];
  if (row > kMaxRow) return unsupported(0, static_cast<uint32_t>(x->dim - 1));
  if (row == 0) return {};
  const auto* in = static_cast<const int16_t*>(x->data);
  auto* y = static_cast<int16_t*>(out->data);
  for (int64_t start = 0; start < x->numel; start += row) {
    if (!softmax_s16_row(in + start, y + start, row, static_cast<int32_t>(multiplier), static_cast<int32_t>(shift),
                         static_cast<const int16_t*>(exp_lut->data),
                         static_cast<const int16_t*>(one_by_one_lut->data))) {
      return bad_argument(4);
    }
  }
  return {};
}

Status cortex_m_quantized_add_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 10));
  KILN_TRY(const Tensor* a, input_tensor(args, 0, ScalarType::kShort));
  KILN_TRY(const Tensor* b, input_tensor(args, 3, ScalarType::kShort));
  if (!same_sizes(*a, *b)) return shape_mismatch(3);
  int32_t m[6];  // the multiplier and shift of self, other and the sum
  for (size_t k = 0; k < 3; ++k) {
    const size_t at = k < 2 ? 1 + 3 * k : 6;
    KILN_TRY(int64_t multiplier, ranged_int(args, at, INT32_MIN, INT32_MAX));
    KILN_TRY(int64_t shift, ranged_int(args, at + 1, -31, 31));
    m[2 * k] = static_cast<int32_t>(multiplier), m[2 * k + 1] = static_cast<int32_t>(shift);
  }
  KILN_TRY(int64_t low, ranged_int(args, 8, INT16_MIN, INT16_MAX));
  KILN_TRY(int64_t high, ranged_int(args, 9, low, INT16_MAX));
  KILN_TRY(Tensor * out, output_tensor(args, 10, ScalarType::kShort));
  if (!same_sizes(*out, *a)) return shape_mismatch(10);
  const auto *x = static_cast<const int16_t*>(a->data), *y = static_cast<const int16_t*>(b->data);
  auto* z = static_cast<int16_t*>(out->data);
  for (uint32_t i = 0; i < a->numel; ++i) {
    // |q| <= 2^15: shifted by 15, within int32.
    const int32_t left = fixed::requantize(x[i] * (1 << kAddLeftShift), m[0], m[1]);
    const int32_t right = fixed::requantize(y[i] * (1 << kAddLeftShift), m[2], m[3]);
    const int32_t v = fixed::requantize(fixed::wrap32(int64_t{left} + right), m[4], m[5]);
    z[i] = static_cast<int16_t>(v < low ? low : (v > high ? high : v));
  }
  return {};
}

Status activation_range_s16(const KernelArgs& args, size_t low_at, size_t high_at, int32_t range[2]) {
  KILN_TRY(int64_t low, ranged_int(args, low_at, INT16_MIN, INT16_MAX));
  KILN_TRY(int64_t high, ranged_int(args, high_at, low, INT16_MAX));
  range[0] = static_cast<int32_t>(low), range[1] = static_cast<int32_t>(high);
  return {};
}

Status s64_requantization(const KernelArgs& args, size_t at, int64_t channels) {
  for (size_t k = 0; k < 2; ++k) {
    const Value& list = args[at + k];
    if (list.kind != ValueKind::kIntList) return bad_argument(at + k, static_cast<uint32_t>(list.kind));
    if (list.list.count != 1 && static_cast<int64_t>(list.list.count) != channels) return shape_mismatch(at + k);
    for (size_t j = 0; j < list.list.count; ++j) {
      const int64_t v = args.int_item(list, j);
      if (k == 0 ? (v < INT32_MIN || v > INT32_MAX) : (v < -31 || v > 14))
        return unsupported(at + k, static_cast<uint32_t>(j));
    }
  }
  if (args[at].list.count != args[at + 1].list.count) return shape_mismatch(at + 1);
  return {};
}

Status cortex_m_quantized_linear_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kShort));
  KILN_TRY(const Tensor* w, input_tensor(args, 1, ScalarType::kChar));
  if (w->dim != 2) return shape_mismatch(1, w->dim);
  if (x->dim < 1 || x->sizes[x->dim - 1] != w->sizes[1]) return shape_mismatch(0);
  const int64_t in = w->sizes[1], out_features = w->sizes[0];
  if (in > kMaxRow) return unsupported(1);
  const int64_t* bias = nullptr;
  if (!is_null(args, 2)) {
    KILN_TRY(const Tensor* b, input_tensor(args, 2, ScalarType::kLong));
    if (b->numel != out_features) return shape_mismatch(2, b->numel);
    bias = static_cast<const int64_t*>(b->data);
    for (int64_t o = 0; o < out_features; ++o) {
      if (bias[o] < -kMaxBias || bias[o] > kMaxBias) return unsupported(2, static_cast<uint32_t>(o));
    }
  }
  KILN_CHECK(s64_requantization(args, 3, out_features));
  KILN_TRY(int64_t high, ranged_int(args, 5, INT16_MIN, INT16_MAX));
  KILN_TRY(int64_t low, ranged_int(args, 6, INT16_MIN, high));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d + 1 < x->dim; ++d) sizes[d] = x->sizes[d];
  sizes[x->dim - 1] = out_features;
  KILN_TRY(Tensor * out, output_tensor(args, 7, ScalarType::kShort));
  KILN_CHECK(expect_sizes(*out, sizes, x->dim, 7));
  if (out->numel == 0) return {};
  const bool per_channel = args[3].list.count != 1;
  const auto* rows = static_cast<const int16_t*>(x->data);
  auto* y = static_cast<int16_t*>(out->data);
  for (int64_t r = 0; r < x->numel / in; ++r, rows += in) {
    for (int64_t o = 0; o < out_features; ++o) {
      const int8_t* weights = s8(*w) + o * in;
      int64_t acc = bias != nullptr ? bias[o] : 0;  // |products| < 2^22, at most 2^16 of them
      for (int64_t i = 0; i < in; ++i) acc += static_cast<int32_t>(rows[i]) * weights[i];
      const size_t j = per_channel ? static_cast<size_t>(o) : 0;
      const int32_t v = fixed::requantize_s64(acc, static_cast<int32_t>(args.int_item(args[3], j)),
                                              static_cast<int32_t>(args.int_item(args[4], j)));
      *y++ = static_cast<int16_t>(v < low ? low : (v > high ? high : v));
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
