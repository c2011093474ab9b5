// The shapes, the direct path and the input bands the two convolutions share (internal):
// quantized_conv.cpp and quantized_depthwise.cpp. weight_at(o, ci, ky, kx) names a weight in
// either layout (OHWI for conv2d, IHWO for depthwise).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "requantize.h"

namespace kiln::runtime::kernels {

struct ConvShape {
  int64_t n, c, h, w, cout, kh, kw, cin_g, cout_g, oh, ow;
  int64_t xs[4], ys[4];  // element steps of N, C, H, W in the input's and the output's memory
  int64_t stride[2], padding[2], dilation[2];
  int64_t input_offset, output_offset;
  int32_t range[2];
};

// The geometry (positions 3 .. 5: stride, padding, dilation) of input x and the output size;
// s->kh and s->kw are set. Every convolution's (the int16 ones' too: quantized_conv_s16.cpp).
inline Status conv_geometry(const KernelArgs& args, const Tensor& x, ConvShape* s) {
  if (x.dim != 4) return unsupported(0, x.dim);
  KILN_CHECK(pair_arg(args, 3, 1, kMaxParam, s->stride));
  KILN_CHECK(pair_arg(args, 4, 0, kMaxParam, s->padding));
  KILN_CHECK(pair_arg(args, 5, 1, kMaxParam, s->dilation));
  s->n = x.sizes[0], s->c = x.sizes[1], s->h = x.sizes[2], s->w = x.sizes[3];
  nchw_steps(x, s->xs);
  const int64_t span_h = s->h + 2 * s->padding[0] - s->dilation[0] * (s->kh - 1) - 1;
  const int64_t span_w = s->w + 2 * s->padding[1] - s->dilation[1] * (s->kw - 1) - 1;
  if (span_h < 0 || span_w < 0) return shape_mismatch(1);
  s->oh = span_h / s->stride[0] + 1, s->ow = span_w / s->stride[1] + 1;
  return {};
}

// The arguments both int8 convolutions share; `shift` is 1 for depthwise (its depth_multiplier
// comes before the offsets).
inline Status conv_shape(const KernelArgs& args, const Tensor& x, size_t shift, ConvShape* s) {
  KILN_CHECK(conv_geometry(args, x, s));
  KILN_TRY(s->input_offset, ranged_int(args, 6 + shift, -kMaxParam, kMaxParam));
  KILN_TRY(s->output_offset, ranged_int(args, 7 + shift, INT32_MIN, INT32_MAX));
  KILN_CHECK(activation_range(args, 10 + shift, 11 + shift, s->range));
  if (args[12 + shift].kind != ValueKind::kTensor) return bad_argument(12 + shift);
  return {};
}

// weight_at(o, ci, ky, kx): the weight of output channel o, input channel ci of its group.
// The sum of products of output pixel (oy, ox) of channel o (input channels from first_in), mod
// 2^32. 32-bit arithmetic throughout (a Cortex-M's own width): each product (|x + offset| < 2^17,
// |w| <= 128) fits an int32, the sum wraps as CMSIS-NN's int32 accumulator, and every index is
// inside a tensor that is in memory, so it fits a ptrdiff_t.
template <typename WeightAt>
int64_t pixel_sum(const ConvShape& s, const int8_t* x, int64_t first_in, int64_t o, int64_t oy, int64_t ox,
                  WeightAt weight_at) {
  const auto h = static_cast<ptrdiff_t>(s.h), w = static_cast<ptrdiff_t>(s.w);
  const auto channel_step = static_cast<ptrdiff_t>(s.xs[1]), row = static_cast<ptrdiff_t>(s.xs[2]);
  const auto column = static_cast<ptrdiff_t>(s.xs[3]);
  const auto offset = static_cast<int32_t>(s.input_offset);
  const auto y0 = static_cast<ptrdiff_t>(oy * s.stride[0] - s.padding[0]);
  const auto x0 = static_cast<ptrdiff_t>(ox * s.stride[1] - s.padding[1]);
  const auto dy = static_cast<ptrdiff_t>(s.dilation[0]), dx = static_cast<ptrdiff_t>(s.dilation[1]);
  const auto kh = static_cast<ptrdiff_t>(s.kh), kw = static_cast<ptrdiff_t>(s.kw);
  const auto channels = static_cast<ptrdiff_t>(s.cin_g);
  const int8_t* first = x + static_cast<ptrdiff_t>(first_in) * channel_step;
  uint32_t acc = 0;
  for (ptrdiff_t ky = 0; ky < kh; ++ky) {
    const ptrdiff_t iy = y0 + ky * dy;
    if (iy < 0 || iy >= h) continue;
    for (ptrdiff_t kx = 0; kx < kw; ++kx) {
      const ptrdiff_t ix = x0 + kx * dx;
      if (ix < 0 || ix >= w) continue;
      const int8_t* tap = first + iy * row + ix * column;
      for (ptrdiff_t ci = 0; ci < channels; ++ci, tap += channel_step) {
        const auto product = (static_cast<int32_t>(*tap) + offset) * static_cast<int32_t>(weight_at(o, ci, ky, kx));
        acc += static_cast<uint32_t>(product);
      }
    }
  }
  return static_cast<int32_t>(acc);
}

// weight_at(o, ci, ky, kx): the weight of output channel o, input channel ci of its group. The
// direct path: each pixel's bias plus sum, tap by tap.
template <typename WeightAt>
void convolve_direct(const ConvShape& s, const int8_t* x, const int32_t* bias, const OutputStage& out, int8_t* y,
                     WeightAt weight_at) {
  for (int64_t b = 0; b < s.n; ++b) {
    const int8_t* batch = x + b * s.xs[0];
    for (int64_t o = 0; o < s.cout; ++o) {
      const int64_t first_in = o / s.cout_g * s.cin_g;
      const int64_t start = bias != nullptr ? bias[o] : 0;
      for (int64_t oy = 0; oy < s.oh; ++oy) {
        int8_t* row = y + b * s.ys[0] + o * s.ys[1] + oy * s.ys[2];
        for (int64_t ox = 0; ox < s.ow; ++ox) {
          row[ox * s.ys[3]] = out.scalar(fixed::wrap32(start + pixel_sum(s, batch, first_in, o, oy, ox, weight_at)), o);
        }
      }
    }
  }
}

constexpr ptrdiff_t kBandBytes = 3072;  // the stack's band of input rows (or columns buffer)

// Input columns that n output pixels of a row read, and input rows that n output rows read.
inline ptrdiff_t band_cols(const ConvShape& s, int64_t n) {
  return static_cast<ptrdiff_t>((n - 1) * s.stride[1] + (s.kw - 1) * s.dilation[1] + 1);
}
inline ptrdiff_t band_rows(const ConvShape& s, int64_t n) {
  return static_cast<ptrdiff_t>((n - 1) * s.stride[0] + (s.kh - 1) * s.dilation[0] + 1);
}

// dst[i] = src[i stride] for i < n: one tap's input channels, or a row's columns.
inline void copy_channels(const int8_t* src, ptrdiff_t stride, ptrdiff_t n, int8_t* dst) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n));
    return;
  }
  ptrdiff_t i = 0;
#if defined(KILN_HELIUM)
  if (stride < 65536 / 8) {  // 8 channels a step: a gather of 16-bit offsets, a narrowing store
    const uint16x8_t apart = vmulq_n_u16(vidupq_n_u16(0, 1), static_cast<uint16_t>(stride));
    for (; i < n; i += 8) {
      const mve_pred16_t lanes = vctp16q(static_cast<uint32_t>(n - i));
      const auto* from = reinterpret_cast<const uint8_t*>(src + i * stride);
      vstrbq_p_u16(reinterpret_cast<uint8_t*>(dst + i), vldrbq_gather_offset_z_u16(from, apart, lanes), lanes);
    }
  }
#endif
  for (; i < n; ++i) dst[i] = src[i * stride];
}

// Copies `rows` input rows from first_row of `plane` (steps s.xs) into band[r][col] (cols columns
// from input column first_col); what lies outside the input is `pad`.
inline void fill_rows(const ConvShape& s, const int8_t* plane, ptrdiff_t first_row, ptrdiff_t rows, ptrdiff_t first_col,
                      ptrdiff_t cols, int8_t pad, int8_t* band) {
  const auto h = static_cast<ptrdiff_t>(s.h), w = static_cast<ptrdiff_t>(s.w);
  const ptrdiff_t lo = first_col < 0 ? -first_col : 0;
  const ptrdiff_t hi = w - first_col < cols ? w - first_col : cols;  // columns [lo, hi) lie inside
  for (ptrdiff_t r = 0; r < rows; ++r) {
    int8_t* dst = band + r * cols;
    const ptrdiff_t iy = first_row + r;
    if (iy < 0 || iy >= h || hi <= lo) {
      std::memset(dst, pad, static_cast<size_t>(cols));
      continue;
    }
    if (lo > 0) std::memset(dst, pad, static_cast<size_t>(lo));
    if (hi < cols) std::memset(dst + hi, pad, static_cast<size_t>(cols - hi));
    copy_channels(plane + iy * s.xs[2] + (first_col + lo) * s.xs[3], static_cast<ptrdiff_t>(s.xs[3]), hi - lo,
                  dst + lo);
  }
}

// The padding's value (the input's zero point) is an int8.
inline bool pad_fits(const ConvShape& s) { return -s.input_offset >= INT8_MIN && -s.input_offset <= INT8_MAX; }

// The bias (argument 2), the requantization (argument `requantize_at`) and the int8 output
// (argument `out_at`) of s's shape in either DimOrder, its steps into s.ys.
inline Status conv_output(KernelArgs& args, size_t requantize_at, size_t out_at, ConvShape* s, const int32_t** bias,
                          Requantization* q, Tensor** out) {
  KILN_TRY(*bias, optional_channels(args, 2, s->cout));
  KILN_TRY(*q, tensor_requantization(args, requantize_at, s->cout));
  const int64_t sizes[4] = {s->n, s->cout, s->oh, s->ow};
  KILN_TRY(*out, int8_output(args, out_at, sizes, 4, true));
  nchw_steps(**out, s->ys);
  return {};
}

}  // namespace kiln::runtime::kernels
