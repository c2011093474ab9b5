// Integer cortex_m convolutions of int16 activations (CMSIS-NN's s16 conventions: zero points 0,
// int8 symmetric weights, int64 bias and sums), kiln's names, as kiln.program.kernels.integer_s16
// computes them:
//   cortex_m::quantized_conv2d_s16.out (input, weight, bias?, stride, padding, dilation,
//     requantize_multipliers, requantize_shifts, activation_min, activation_max, out):
//     arm_convolve_s16: input NCHW, weight OHWI, groups C_in / I, zero padding.
//   cortex_m::quantized_depthwise_conv2d_s16.out (input, weight, bias?, stride, padding,
//     dilation, depth_multiplier, requantize_multipliers, requantize_shifts, activation_min,
//     activation_max, out): arm_depthwise_conv_s16: weight IHWO [1, kh, kw, C_in x multiplier],
//     output channel o reading input channel o / multiplier.
// Each output's bias plus its window's products, exact in int64 (a window of at most 2^16 values,
// each product below 2^22; a bias within 2^40), requantize_s64 (fixed_point.h) with its channel's
// multiplier and shift (IntLists of 1 or C_out items, shifts within [-31, 14]), clamped to the
// activation range (int16 values). The input in either DimOrder, the out tensor contiguous.
// Every code path (dot.h's Helium, DSP, plain C) computes these sums in the same C.
#include "conv_shape.h"
#include "kiln/runtime/try.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxWindow = int64_t{1} << 16;
constexpr int64_t kMaxBias = int64_t{1} << 40;

// The geometry (conv_geometry) of a window of at most kMaxWindow values; s->kh, kw, cin_g and
// cout are set.
Status shape16(const KernelArgs& args, const Tensor& x, ConvShape* s) {
  if (x.dim != 4) return unsupported(0, x.dim);
  if (s->kh < 1 || s->kw < 1 || s->cin_g < 1) return shape_mismatch(1);
  if (s->kh * s->kw * s->cin_g > kMaxWindow) return unsupported(1);
  return conv_geometry(args, x, s);
}

// The bias (position 2: None or C_out int64 values within 2^40), requantization (q_at, q_at + 1),
// activation range (q_at + 2, q_at + 3) and out tensor (q_at + 4) of an s16 convolution.
Status outputs16(const KernelArgs& args, const ConvShape& s, size_t q_at, const int64_t** bias, int32_t range[2],
                 Tensor** out) {
  *bias = nullptr;
  if (!is_null(args, 2)) {
    KILN_TRY(const Tensor* b, input_tensor(args, 2, ScalarType::kLong));
    if (b->numel != s.cout) return shape_mismatch(2, b->numel);
    *bias = static_cast<const int64_t*>(b->data);
    for (int64_t o = 0; o < s.cout; ++o) {
      if ((*bias)[o] < -kMaxBias || (*bias)[o] > kMaxBias) return unsupported(2, static_cast<uint32_t>(o));
    }
  }
  KILN_CHECK(s64_requantization(args, q_at, s.cout));
  KILN_CHECK(activation_range_s16(args, q_at + 2, q_at + 3, range));
  const int64_t sizes[4] = {s.n, s.cout, s.oh, s.ow};
  KILN_TRY(*out, output_tensor(args, q_at + 4, ScalarType::kShort));
  return expect_sizes(**out, sizes, 4, q_at + 4);
}

// weight_at(o, ci, ky, kx): the weight of output channel o, input channel ci of its group.
// Indices within tensors in memory: 32-bit arithmetic (a Cortex-M's own width).
template <typename WeightAt>
void convolve16(const ConvShape& s, const int16_t* x, const int64_t* bias, const KernelArgs& args, size_t q_at,
                const int32_t range[2], int16_t* y, WeightAt weight_at) {
  const auto h = static_cast<ptrdiff_t>(s.h), w = static_cast<ptrdiff_t>(s.w);
  const auto batch_step = static_cast<ptrdiff_t>(s.xs[0]), channel_step = static_cast<ptrdiff_t>(s.xs[1]);
  const auto row = static_cast<ptrdiff_t>(s.xs[2]), column = static_cast<ptrdiff_t>(s.xs[3]);
  const auto kh = static_cast<ptrdiff_t>(s.kh), kw = static_cast<ptrdiff_t>(s.kw);
  const auto channels = static_cast<ptrdiff_t>(s.cin_g);
  const auto dy = static_cast<ptrdiff_t>(s.dilation[0]), dx = static_cast<ptrdiff_t>(s.dilation[1]);
  const bool per_channel = args[q_at].list.count != 1;
  for (ptrdiff_t b = 0; b < static_cast<ptrdiff_t>(s.n); ++b) {
    for (ptrdiff_t o = 0; o < static_cast<ptrdiff_t>(s.cout); ++o) {
      const size_t j = per_channel ? static_cast<size_t>(o) : 0;
      const auto multiplier = static_cast<int32_t>(args.int_item(args[q_at], j));
      const auto shift = static_cast<int32_t>(args.int_item(args[q_at + 1], j));
      const int16_t* first = x + b * batch_step + (o / static_cast<ptrdiff_t>(s.cout_g)) * channels * channel_step;
      for (ptrdiff_t oy = 0; oy < static_cast<ptrdiff_t>(s.oh); ++oy) {
        const ptrdiff_t y0 = oy * static_cast<ptrdiff_t>(s.stride[0]) - static_cast<ptrdiff_t>(s.padding[0]);
        for (ptrdiff_t ox = 0; ox < static_cast<ptrdiff_t>(s.ow); ++ox) {
          const ptrdiff_t x0 = ox * static_cast<ptrdiff_t>(s.stride[1]) - static_cast<ptrdiff_t>(s.padding[1]);
          int64_t acc = bias != nullptr ? bias[o] : 0;
          for (ptrdiff_t ky = 0; ky < kh; ++ky) {
            const ptrdiff_t iy = y0 + ky * dy;
            if (iy < 0 || iy >= h) continue;
            for (ptrdiff_t kx = 0; kx < kw; ++kx) {
              const ptrdiff_t ix = x0 + kx * dx;
              if (ix < 0 || ix >= w) continue;
              const int16_t* tap = first + iy * row + ix * column;
              for (ptrdiff_t ci = 0; ci < channels; ++ci, tap += channel_step) {  // SMLAL: 32 x 32 + 64
                acc += static_cast<int32_t>(*tap) * static_cast<int32_t>(weight_at(o, ci, ky, kx));
              }
            }
          }
          const int32_t v = fixed::requantize_s64(acc, multiplier, shift);
          *y++ = static_cast<int16_t>(v < range[0] ? range[0] : (v > range[1] ? range[1] : v));
        }
      }
    }
  }
}

// The bias, requantization, range and out tensor (outputs16, from q_at) of a call whose shape is
// s, then its convolution.
template <typename WeightAt>
Status finish16(const KernelArgs& args, const ConvShape& s, const Tensor& x, size_t q_at, WeightAt weight_at) {
  const int64_t* bias;
  int32_t range[2];
  Tensor* out;
  KILN_CHECK(outputs16(args, s, q_at, &bias, range, &out));
  convolve16(s, static_cast<const int16_t*>(x.data), bias, args, q_at, range, static_cast<int16_t*>(out->data),
             weight_at);
  return {};
}

}  // namespace

Status cortex_m_quantized_conv2d_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 10));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kShort));
  KILN_TRY(const Tensor* wt, input_tensor(args, 1, ScalarType::kChar));
  if (wt->dim != 4) return shape_mismatch(1, wt->dim);
  ConvShape s{};
  s.cout = wt->sizes[0], s.kh = wt->sizes[1], s.kw = wt->sizes[2], s.cin_g = wt->sizes[3];
  KILN_CHECK(shape16(args, *x, &s));
  if (s.c % s.cin_g != 0) return shape_mismatch(1);
  const int64_t groups = s.c / s.cin_g;
  if (groups < 1 || s.cout % groups != 0) return shape_mismatch(1);
  s.cout_g = s.cout / groups;
  const int8_t* weight = s8(*wt);
  const auto kh = static_cast<ptrdiff_t>(s.kh), kw = static_cast<ptrdiff_t>(s.kw);
  const auto cin = static_cast<ptrdiff_t>(s.cin_g);
  return finish16(args, s, *x, 6, [=](ptrdiff_t o, ptrdiff_t ci, ptrdiff_t ky, ptrdiff_t kx) {
    return weight[((o * kh + ky) * kw + kx) * cin + ci];
  });
}

Status cortex_m_quantized_depthwise_conv2d_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 11));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kShort));
  KILN_TRY(const Tensor* wt, input_tensor(args, 1, ScalarType::kChar));
  if (wt->dim != 4 || wt->sizes[0] != 1) return shape_mismatch(1, wt->dim);
  KILN_TRY(int64_t multiplier, ranged_int(args, 6, 1, kMaxParam));
  ConvShape s{};
  s.cout = wt->sizes[3], s.kh = wt->sizes[1], s.kw = wt->sizes[2], s.cin_g = 1;
  KILN_CHECK(shape16(args, *x, &s));
  if (s.cout != s.c * multiplier) return shape_mismatch(1);
  s.cout_g = multiplier;
  const int8_t* weight = s8(*wt);
  const auto kw = static_cast<ptrdiff_t>(s.kw), cout = static_cast<ptrdiff_t>(s.cout);
  return finish16(args, s, *x, 7, [=](ptrdiff_t o, ptrdiff_t, ptrdiff_t ky, ptrdiff_t kx) {
    return weight[(ky * kw + kx) * cout + o];
  });
}

}  // namespace kiln::runtime::kernels
