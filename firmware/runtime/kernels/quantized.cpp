// Integer cortex_m kernels on int8 tensors, as kiln.program.kernels.integer computes them
// (ExecuTorch's schemas, CMSIS-NN's arithmetic; fixed_point.h):
//   cortex_m::quantized_add.out (self, self_zero_point, self_multiplier, self_shift, other,
//     other_zero_point, other_multiplier, other_shift, output_zero_point, output_multiplier,
//     output_shift, activation_min, activation_max, out): operands of one shape, each tensor in
//     its own DimOrder (ExecuTorch's Cortex-M flow mixes them);
//     requantize(requantize((a - zp_a) << 20, ..) + requantize((b - zp_b) << 20, ..), ..) + zp_out.
//   cortex_m::quantized_avg_pool2d.out (input, kernel_size, stride, padding, ceil_mode,
//     zero_point, multiplier, shift, scratch, out): NCHW, each in either DimOrder; each
//     window clipped to the input;
//     zero_point plus the average of its values less zero_point (the sum exact), rounded halves
//     to even as PT2E's float average quantized (arm_avgpool_s8 rounds the raw values' average
//     halves away from zero). multiplier, shift and scratch are ExecuTorch's and not read.
//   cortex_m::softmax.out (input, dim, input_zero_point, output_zero_point, input_multiplier,
//     input_shift, diff_min, out): arm_softmax_s8 along the dim whose elements lie next to each
//     other, the last, or C of a channels-last tensor (ExecuTorch's flow writes both), input and
//     out in one order; output zero point -128.
//   cortex_m::pad.out (input, pre_pad, post_pad, pad_value, out): four pads each side,
//     right-aligned to the input's (1 to 4) dims (those of dims it lacks are not read); for a
//     channels-last input, in its memory order N, H, W, C (as ExecuTorch writes them), the
//     out tensor channels-last too.
#include "quantized.h"
#include "elementwise.h"
#include "kiln/runtime/try.h"

namespace kiln::runtime::kernels {

using fixed::requantize;

namespace {

constexpr int64_t kMaxParam = 1 << 16;  // kernel sizes, strides, padding (pool.cpp's bound)
constexpr int32_t kAddLeftShift = 20;
constexpr int32_t kSoftmaxAccumBits = 12;
constexpr int64_t kSoftmaxZeroPoint = -128;
constexpr int64_t kExactInt32Count = int64_t{1} << 23;  // window sizes whose int8 sum fits an int32

struct Multiplier {
  int32_t multiplier, shift;
};

// A multiplier (position i) and its shift (i + 1): int32, shift within 31.
Result<Multiplier> multiplier_at(const KernelArgs& args, size_t i) {
  KILN_TRY(int64_t m, ranged_int(args, i, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t s, ranged_int(args, i + 1, -31, 31));
  return Multiplier{static_cast<int32_t>(m), static_cast<int32_t>(s)};
}

// Element steps of a plane's rows and columns in memory.
struct Steps {
  ptrdiff_t row, col;
};

// total / count (count > 0) rounded to the nearest integer, halves to even (int64 division: a
// library call on a Cortex-M; window_average's 32-bit path takes one SDIV).
int64_t average_half_even(int64_t total, int64_t count) {
  int64_t quotient = total / count, rest = total % count;  // truncating: rest has total's sign
  if (rest < 0) quotient -= 1, rest += count;        // floor, and rest in [0, count)
  return quotient + (2 * rest > count || (2 * rest == count && (quotient & 1) != 0) ? 1 : 0);
}

// The average of a window of `rows` rows of `cols` elements, from `first` by steps `at`, less
// zero_point, rounded halves to even, plus zero_point.
int64_t window_average(const int8_t* first, Steps at, ptrdiff_t rows, ptrdiff_t cols, int32_t zero_point) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  if (count > kExactInt32Count / 2 || at.col != 1) {  // twice the sum may pass int32, or strided columns: in int64
    int64_t sum = 0;
    for (ptrdiff_t r = 0; r < rows; ++r) {
      for (ptrdiff_t col = 0; col < cols; ++col) sum += first[r * at.row + col * at.col];
    }
    return average_half_even(sum - int64_t{zero_point} * count, count) + zero_point;
  }
  int32_t sum = 0;  // |sum| <= 128 count < 2^30
  if (cols == at.row) {
    sum = byte_sum(first, rows * cols);  // whole rows: one run of bytes
  } else {
    for (ptrdiff_t r = 0; r < rows; ++r) sum += byte_sum(first + r * at.row, cols);
  }
  // 2 (sum - zero_point n) + n, within 2^31 (|q - zero_point| <= 255, n <= 2^22), over 2 n: the average
  // rounded halves up, one SDIV; an exact half (no remainder) that lands on an odd value goes down.
  const auto n = static_cast<int32_t>(count);
  const int32_t twice = 2 * (sum - zero_point * n) + n;
  int32_t quotient = twice / (2 * n);
  const int32_t rest = twice - quotient * 2 * n;
  if (rest < 0) --quotient;                             // floor
  if (rest == 0 && (quotient & 1) != 0) --quotient;     // a half: to even
  return quotient + zero_point;
}

}  // namespace

Result<int64_t> ranged_int(const KernelArgs& args, size_t i, int64_t lo, int64_t hi) {
  KILN_TRY(int64_t v, int_arg(args, i));
  if (v < lo || v > hi) return unsupported(i);
  return v;
}

Status activation_range(const KernelArgs& args, size_t low_at, size_t high_at, int32_t range[2]) {
  KILN_TRY(int64_t low, ranged_int(args, low_at, INT8_MIN, INT8_MAX));
  KILN_TRY(int64_t high, ranged_int(args, high_at, low, INT8_MAX));
  range[0] = static_cast<int32_t>(low), range[1] = static_cast<int32_t>(high);
  return {};
}

Result<Tensor*> int8_output(const KernelArgs& args, size_t n, const int64_t* sizes, size_t dim, bool any_order) {
  KILN_TRY(Tensor * out,
           any_order ? output_tensor_any_order(args, n, ScalarType::kChar) : output_tensor(args, n, ScalarType::kChar));
  KILN_CHECK(expect_sizes(*out, sizes, dim, n));
  return out;
}

namespace {

struct AddParams {
  int64_t a_zp, b_zp, out_zp;
  Multiplier a, b, out;
  int32_t range[2];
};

// quantized_add of operands (one shape) and out in different DimOrders, through the broadcast
// walk; kept out of the kernel so that its loop over tensors of one order compiles as alone.
__attribute__((noinline, cold)) Status add_in_their_orders(const Tensor& a, const Tensor& b, Tensor& out,
                                                           const AddParams& q) {
  const int8_t *x = s8(a), *y = s8(b);
  int8_t* z = s8(out);
  const size_t dims[2] = {a.dim, b.dim};
  const int32_t* const sizes[2] = {a.sizes, b.sizes};
  const DimOrder orders[2] = {a.order, b.order};
  for_each_broadcast(out, dims, sizes, orders, [&](uint32_t i, const uint32_t* at) {
    const int32_t left =
        requantize(static_cast<int32_t>((x[at[0]] - q.a_zp) * (1 << kAddLeftShift)), q.a.multiplier, q.a.shift);
    const int32_t right =
        requantize(static_cast<int32_t>((y[at[1]] - q.b_zp) * (1 << kAddLeftShift)), q.b.multiplier, q.b.shift);
    const int32_t sum = fixed::wrap32(static_cast<int64_t>(left) + right);
    z[i] = clamp_to(requantize(sum, q.out.multiplier, q.out.shift) + q.out_zp, q.range);
  });
  return {};
}

}  // namespace

Status cortex_m_quantized_add_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 13));
  KILN_TRY(const Tensor* a, input_tensor_any_order(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* b, input_tensor_any_order(args, 4, ScalarType::kChar));
  if (!same_sizes(*a, *b)) return shape_mismatch(4);
  KILN_TRY(int64_t a_zp, ranged_int(args, 1, INT8_MIN, INT8_MAX));
  KILN_TRY(Multiplier a_m, multiplier_at(args, 2));
  KILN_TRY(int64_t b_zp, ranged_int(args, 5, INT8_MIN, INT8_MAX));
  KILN_TRY(Multiplier b_m, multiplier_at(args, 6));
  KILN_TRY(int64_t out_zp, ranged_int(args, 8, INT32_MIN, INT32_MAX));
  KILN_TRY(Multiplier out_m, multiplier_at(args, 9));
  int32_t range[2];
  KILN_CHECK(activation_range(args, 11, 12, range));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d < a->dim; ++d) sizes[d] = a->sizes[d];
  KILN_TRY(Tensor * out, int8_output(args, 13, sizes, a->dim, true));
  if (a->order != b->order || a->order != out->order) {
    return add_in_their_orders(*a, *b, *out, AddParams{a_zp, b_zp, out_zp, a_m, b_m, out_m, {range[0], range[1]}});
  }
  const int8_t *x = s8(*a), *y = s8(*b);
  int8_t* z = s8(*out);
  for (uint32_t i = 0; i < a->numel; ++i) {
    // |q - zp| <= 255, so the operand shifted by 20 fits int32.
    const int32_t left =
        requantize(static_cast<int32_t>((x[i] - a_zp) * (1 << kAddLeftShift)), a_m.multiplier, a_m.shift);
    const int32_t right =
        requantize(static_cast<int32_t>((y[i] - b_zp) * (1 << kAddLeftShift)), b_m.multiplier, b_m.shift);
    const int32_t sum = fixed::wrap32(static_cast<int64_t>(left) + right);
    z[i] = clamp_to(requantize(sum, out_m.multiplier, out_m.shift) + out_zp, range);
  }
  return {};
}

Status pool_args(const KernelArgs& args, PoolArgs* p) {
  KILN_CHECK(pair_arg(args, 1, 1, kMaxParam, p->kernel));
  KILN_CHECK(pair_arg(args, 2, 1, kMaxParam, p->stride));
  KILN_CHECK(pair_arg(args, 3, 0, kMaxParam, p->padding));
  if (2 * p->padding[0] > p->kernel[0] || 2 * p->padding[1] > p->kernel[1]) return unsupported(3);
  KILN_TRY(p->ceil_mode, bool_arg(args, 4));
  return {};
}

Status cortex_m_quantized_avg_pool2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 9));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  if (x->dim != 4) return unsupported(0, x->dim);
  PoolArgs pool;
  KILN_CHECK(pool_args(args, &pool));
  const int64_t *kernel = pool.kernel, *stride = pool.stride, *padding = pool.padding;
  const bool ceil_mode = pool.ceil_mode;
  KILN_TRY(int64_t zero_point, ranged_int(args, 5, INT8_MIN, INT8_MAX));
  KILN_CHECK(int_arg(args, 6));
  KILN_CHECK(int_arg(args, 7));
  if (args[8].kind != ValueKind::kTensor) return bad_argument(8);
  const int64_t n = x->sizes[0], c = x->sizes[1], h = x->sizes[2], w = x->sizes[3];
  const int64_t oh = pool_size(h, kernel[0], stride[0], padding[0], ceil_mode);
  const int64_t ow = pool_size(w, kernel[1], stride[1], padding[1], ceil_mode);
  if (oh < 1 || ow < 1) return shape_mismatch(1);
  const int64_t sizes[4] = {n, c, oh, ow};
  KILN_TRY(Tensor * out, int8_output(args, 9, sizes, 4, true));
  if (out->numel == 0) return {};
  int64_t xs[4], ys[4];  // element steps of N, C, H, W in each DimOrder
  nchw_steps(*x, xs);
  nchw_steps(*out, ys);
  const int32_t range[2] = {INT8_MIN, INT8_MAX};
  // Indices within tensors in memory: 32-bit arithmetic (a Cortex-M's own width).
  const auto rows = static_cast<ptrdiff_t>(h), cols = static_cast<ptrdiff_t>(w);
  const auto kh = static_cast<ptrdiff_t>(kernel[0]), kw = static_cast<ptrdiff_t>(kernel[1]);
  const auto sh = static_cast<ptrdiff_t>(stride[0]), sw = static_cast<ptrdiff_t>(stride[1]);
  const auto ph = static_cast<ptrdiff_t>(padding[0]), pw = static_cast<ptrdiff_t>(padding[1]);
  const auto out_rows = static_cast<ptrdiff_t>(oh), out_cols = static_cast<ptrdiff_t>(ow);
  const auto channels = static_cast<ptrdiff_t>(c), planes = static_cast<ptrdiff_t>(n * c);
  const Steps in{static_cast<ptrdiff_t>(xs[2]), static_cast<ptrdiff_t>(xs[3])};
  const auto out_row = static_cast<ptrdiff_t>(ys[2]), out_col = static_cast<ptrdiff_t>(ys[3]);
  const auto zp = static_cast<int32_t>(zero_point);
  const bool global = out_rows == 1 && out_cols == 1 && ph == 0 && pw == 0 && kh >= rows && kw >= cols;
  for (ptrdiff_t plane = 0; plane < planes; ++plane) {
    const ptrdiff_t batch = plane / channels, channel = plane % channels;
    const int8_t* src = s8(*x) + batch * static_cast<ptrdiff_t>(xs[0]) + channel * static_cast<ptrdiff_t>(xs[1]);
    int8_t* dst = s8(*out) + batch * static_cast<ptrdiff_t>(ys[0]) + channel * static_cast<ptrdiff_t>(ys[1]);
    if (global) {  // a plane a window
      *dst = clamp_to(window_average(src, in, rows, cols, zp), range);
      continue;
    }
    for (ptrdiff_t oy = 0; oy < out_rows; ++oy) {
      const ptrdiff_t r0 = oy * sh - ph, r1 = r0 + kh < rows ? r0 + kh : rows, top = r0 > 0 ? r0 : 0;
      for (ptrdiff_t ox = 0; ox < out_cols; ++ox) {
        const ptrdiff_t c0 = ox * sw - pw, c1 = c0 + kw < cols ? c0 + kw : cols, left = c0 > 0 ? c0 : 0;
        if (r1 <= top || c1 <= left) return shape_mismatch(1);  // a window of no input element
        const int64_t average = window_average(src + top * in.row + left * in.col, in, r1 - top, c1 - left, zp);
        dst[oy * out_row + ox * out_col] = clamp_to(average, range);
      }
    }
  }
  return {};
}

namespace {

// arm_softmax_s8's arithmetic for one row: each difference d = x - max (within [-255, 0]) has its
// exponential, the row's sum of them (mod 2^32, as CMSIS-NN's int32 sum) one scale, and each d its
// output.
struct Softmax {
  int32_t multiplier, shift, diff_min;
  int32_t scale = 0, bits_over_unit = 0;

  // e(d) for d >= diff_min: d << shift wraps to int32 as the numpy reference does.
  int32_t exp_of(int32_t d) const {
    return fixed::exp_on_negative_values(
        fixed::doubling_high_mult(fixed::wrap32(static_cast<int64_t>(d) * (int64_t{1} << shift)), multiplier));
  }
  // What d adds to the sum (0 below diff_min).
  uint32_t term(int32_t d) const {
    return d < diff_min ? 0u : static_cast<uint32_t>(fixed::divide_by_power_of_two(exp_of(d), kSoftmaxAccumBits));
  }
  void set_sum(uint32_t sum) {
    const int32_t headroom = fixed::count_leading_zeros(sum);
    const uint32_t normalized = static_cast<int32_t>(sum) > 0 ? sum << headroom : 0u;
    scale = fixed::one_over_one_plus_x(fixed::wrap32(static_cast<int64_t>(normalized) - (int64_t{1} << 31)));
    bits_over_unit = kSoftmaxAccumBits - headroom + 23;
  }
  int8_t output(int32_t d) const {
    if (d < diff_min) return INT8_MIN;
    const int64_t v = fixed::divide_by_power_of_two(fixed::doubling_high_mult(scale, exp_of(d)), bits_over_unit);
    const int32_t range[2] = {INT8_MIN, INT8_MAX};
    return clamp_to(v + kSoftmaxZeroPoint, range);
  }
};

constexpr int64_t kSoftmaxTableRow = 64;  // rows at least this long compute each distinct value once

// A row of `size` values, each exponential computed twice (short rows).
void softmax_row(const int8_t* x, int8_t* y, int64_t size, Softmax f) {
  int32_t max = INT8_MIN;
  for (int64_t i = 0; i < size; ++i) max = x[i] > max ? x[i] : max;
  uint32_t sum = 0;
  for (int64_t i = 0; i < size; ++i) sum += f.term(x[i] - max);
  f.set_sum(sum);
  for (int64_t i = 0; i < size; ++i) y[i] = f.output(x[i] - max);
}

// A long row: the values' histogram gives the max and the sum (each distinct value's term times
// its count, mod 2^32: the same sum), then a table of the 256 values' outputs.
void softmax_row_by_table(const int8_t* x, int8_t* y, int64_t size, Softmax f) {
  uint32_t count[256] = {};
  for (int64_t i = 0; i < size; ++i) ++count[x[i] + 128];
  int32_t top = 255;
  while (count[top] == 0) --top;  // size > 0
  uint32_t sum = 0;
  for (int32_t v = 0; v <= top; ++v) {
    if (count[v] != 0) sum += count[v] * f.term(v - top);
  }
  f.set_sum(sum);
  int8_t table[256];
  for (int32_t v = 0; v <= top; ++v) {
    if (count[v] != 0) table[v] = f.output(v - top);
  }
  for (int64_t i = 0; i < size; ++i) y[i] = table[x[i] + 128];
}

}  // namespace

Status cortex_m_softmax_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  if (x->dim == 0) return unsupported(0);
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  KILN_TRY(const size_t dim, dim_index(dim_arg, x->dim, 1));
  const size_t innermost = x->order == DimOrder::kChannelsLast ? 1 : x->dim - 1u;  // rows lie along it
  if (dim != innermost) return unsupported(1);
  KILN_CHECK(int_arg(args, 2));
  KILN_CHECK(ranged_int(args, 3, kSoftmaxZeroPoint, kSoftmaxZeroPoint));
  KILN_TRY(int64_t multiplier, ranged_int(args, 4, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t shift, ranged_int(args, 5, 0, 30));
  KILN_TRY(int64_t diff_min, ranged_int(args, 6, INT32_MIN, INT32_MAX));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d < x->dim; ++d) sizes[d] = x->sizes[d];
  KILN_TRY(Tensor * out, int8_output(args, 7, sizes, x->dim, true));
  KILN_CHECK(same_order(*x, *out, 7));
  const int64_t row = x->sizes[innermost];
  if (row == 0) return {};
  const Softmax f{static_cast<int32_t>(multiplier), static_cast<int32_t>(shift), static_cast<int32_t>(diff_min)};
  for (int64_t start = 0; start < x->numel; start += row) {
    if (row >= kSoftmaxTableRow) {
      softmax_row_by_table(s8(*x) + start, s8(*out) + start, row, f);
    } else {
      softmax_row(s8(*x) + start, s8(*out) + start, row, f);
    }
  }
  return {};
}

Status cortex_m_pad_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 4));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  if (x->dim < 1 || x->dim > 4) return unsupported(0, x->dim);
  int64_t pre[4], post[4];
  size_t n_pre = 0, n_post = 0;
  KILN_CHECK(int_list_arg(args, 1, pre, 4, &n_pre));
  KILN_CHECK(int_list_arg(args, 2, post, 4, &n_post));
  if (n_pre != 4) return unsupported(1, static_cast<uint32_t>(n_pre));
  if (n_post != 4) return unsupported(2, static_cast<uint32_t>(n_post));
  KILN_TRY(int64_t value, ranged_int(args, 3, INT8_MIN, INT8_MAX));
  // As 4-D in memory order: leading dims of 1, then the input's (N, H, W, C: channels-last);
  // each pad within [0, 2^16].
  constexpr size_t kChannelsLastDims[4] = {0, 2, 3, 1};
  const bool nhwc = x->order == DimOrder::kChannelsLast;  // 4-D: offset 0
  int64_t in4[4], out4[4], lead[4], sizes[4];
  const size_t offset = 4 - x->dim;
  for (size_t d = 0; d < 4; ++d) {
    if (pre[d] < 0 || pre[d] > kMaxParam) return unsupported(1, static_cast<uint32_t>(d));
    if (post[d] < 0 || post[d] > kMaxParam) return unsupported(2, static_cast<uint32_t>(d));
    in4[d] = d < offset ? 1 : x->sizes[nhwc ? kChannelsLastDims[d] : d - offset];
    lead[d] = d < offset ? 0 : pre[d];  // the pads of dims the input lacks are not read
    out4[d] = in4[d] + lead[d] + (d < offset ? 0 : post[d]);
    sizes[nhwc ? kChannelsLastDims[d] : d] = out4[d];
  }
  KILN_TRY(Tensor * out, int8_output(args, 4, sizes + offset, x->dim, true));
  KILN_CHECK(same_order(*x, *out, 4));
  int8_t* y = s8(*out);
  for (uint32_t i = 0; i < out->numel; ++i) y[i] = static_cast<int8_t>(value);
  const int8_t* src = s8(*x);
  uint32_t i = 0;
  for (int64_t a = 0; a < in4[0]; ++a) {
    for (int64_t b = 0; b < in4[1]; ++b) {
      for (int64_t c = 0; c < in4[2]; ++c) {
        const int64_t row = (((a + lead[0]) * out4[1] + b + lead[1]) * out4[2] + c + lead[2]) * out4[3] + lead[3];
        for (int64_t d = 0; d < in4[3]; ++d) y[row + d] = src[i++];
      }
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
