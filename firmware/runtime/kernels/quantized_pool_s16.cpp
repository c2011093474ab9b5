// Integer cortex_m kernels of int16 pooling (CMSIS-NN's s16 conventions: zero point 0, input and
// output of one quantization), kiln's names, as kiln.program.kernels.integer_s16 computes them:
//   cortex_m::quantized_avg_pool2d_s16.out (input, kernel_size, stride, padding, ceil_mode,
//     activation_min, activation_max, out): arm_avgpool_s16 on an NCHW tensor, each window
//     clipped to the input; its exact sum plus or minus half its count, divided by the count
//     (truncating), clamped to the activation range (int16 values).
//   cortex_m::quantized_max_pool2d_s16.out (input, kernel_size, stride, padding, dilation,
//     ceil_mode, activation_min, activation_max, out): arm_max_pool_s16: aten::max_pool2d's
//     windows (pool_max.cpp; a window of no input element gives -32768), clamped.
// Input and out tensor contiguous.
#include "kiln/runtime/try.h"
#include "movement.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxParam = 1 << 16;  // kernel sizes, strides, padding (pool.cpp's bound)

// The rounded average of a window of `rows` rows of `cols` values from `first` (rows `row` apart):
// the exact sum (|sum| < 2^15 rows cols, within int64) plus or minus half the count, divided by
// the count (truncating).
int64_t window_average(const int16_t* first, ptrdiff_t row, ptrdiff_t rows, ptrdiff_t cols) {
  int64_t sum = 0;
  for (ptrdiff_t r = 0; r < rows; ++r) {
    const int16_t* p = first + r * row;
    int32_t part = 0;  // at most 2^16 values of a row: |part| < 2^31
    for (ptrdiff_t c = 0; c < cols; ++c) part += p[c];
    sum += part;
  }
  const int64_t count = static_cast<int64_t>(rows) * cols;
  return (sum > 0 ? sum + count / 2 : sum - count / 2) / count;
}

}  // namespace

Status cortex_m_quantized_avg_pool2d_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kShort));
  if (x->dim != 4) return unsupported(0, x->dim);
  PoolArgs pool;
  KILN_CHECK(pool_args(args, &pool));
  const int64_t *kernel = pool.kernel, *stride = pool.stride, *padding = pool.padding;
  int32_t range[2];
  KILN_CHECK(activation_range_s16(args, 5, 6, range));
  const int64_t h = x->sizes[2], w = x->sizes[3];
  if (w > kMaxParam) return unsupported(0, 3);  // a row's sum within int32
  const int64_t oh = pool_size(h, kernel[0], stride[0], padding[0], pool.ceil_mode);
  const int64_t ow = pool_size(w, kernel[1], stride[1], padding[1], pool.ceil_mode);
  if (oh < 1 || ow < 1) return shape_mismatch(1);
  const int64_t sizes[4] = {x->sizes[0], x->sizes[1], oh, ow};
  KILN_TRY(Tensor * out, output_tensor(args, 7, ScalarType::kShort));
  KILN_CHECK(expect_sizes(*out, sizes, 4, 7));
  if (out->numel == 0) return {};
  // Indices within tensors in memory: 32-bit arithmetic (a Cortex-M's own width).
  const auto rows = static_cast<ptrdiff_t>(h), cols = static_cast<ptrdiff_t>(w);
  const auto kh = static_cast<ptrdiff_t>(kernel[0]), kw = static_cast<ptrdiff_t>(kernel[1]);
  const auto sh = static_cast<ptrdiff_t>(stride[0]), sw = static_cast<ptrdiff_t>(stride[1]);
  const auto ph = static_cast<ptrdiff_t>(padding[0]), pw = static_cast<ptrdiff_t>(padding[1]);
  const auto out_rows = static_cast<ptrdiff_t>(oh), out_cols = static_cast<ptrdiff_t>(ow);
  const auto planes = static_cast<ptrdiff_t>(x->sizes[0] * x->sizes[1]);
  const auto* in = static_cast<const int16_t*>(x->data);
  auto* y = static_cast<int16_t*>(out->data);
  for (ptrdiff_t plane = 0; plane < planes; ++plane) {
    const int16_t* src = in + plane * rows * cols;
    for (ptrdiff_t oy = 0; oy < out_rows; ++oy) {
      const ptrdiff_t r0 = oy * sh - ph, r1 = r0 + kh < rows ? r0 + kh : rows, top = r0 > 0 ? r0 : 0;
      for (ptrdiff_t ox = 0; ox < out_cols; ++ox) {
        const ptrdiff_t c0 = ox * sw - pw, c1 = c0 + kw < cols ? c0 + kw : cols, left = c0 > 0 ? c0 : 0;
        if (r1 <= top || c1 <= left) return shape_mismatch(1);  // a window of no input element
        const int64_t v = window_average(src + top * cols + left, cols, r1 - top, c1 - left);
        *y++ = static_cast<int16_t>(v < range[0] ? range[0] : (v > range[1] ? range[1] : v));
      }
    }
  }
  return {};
}

Status cortex_m_quantized_max_pool2d_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 8));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kShort));
  if (x->dim != 4) return unsupported(0, x->dim);
  int32_t range[2];
  KILN_CHECK(activation_range_s16(args, 6, 7, range));
  return max_pool2d(args, 8, range);
}

}  // namespace kiln::runtime::kernels
