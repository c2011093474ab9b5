// cortex_m::quantized_depthwise_conv2d.out (input, weight, bias?, stride, padding, dilation,
//   depth_multiplier, input_offset, output_offset, requantize_multipliers, requantize_shifts,
//   activation_min, activation_max, scratch, out): weight IHWO [1, kh, kw, C_in *
//   depth_multiplier]; output channel o reads input channel o / depth_multiplier; the rest as
//   quantized_conv2d (quantized_conv.cpp), whose arithmetic it shares.
// The band path copies as many of a channel's padded rows as fit into a band on the stack, the
// padding filled with the input's zero point, then computes each output row from it; where the
// zero point is no int8 or a row does not fit, the direct path (conv_shape.h).
#include <cstddef>

#include "conv_shape.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxTaps = 64;  // kernel taps held in registers' reach

// Whether the depthwise band path takes s: one input channel a group, at most kMaxTaps taps, and
// one output row's windows fit the band.
bool depthwise_fits(const ConvShape& s) {
  return s.cin_g == 1 && s.c == s.cout / s.cout_g && s.kh * s.kw <= kMaxTaps && pad_fits(s) &&
         band_rows(s, 1) * band_cols(s, s.ow) <= kBandBytes;
}

// One output row of a depthwise channel: taps at tap[k] from each pixel's first, weights wk[k];
// output pixel ox at y + ox s.ys[3].
void depthwise_row(const ConvShape& s, const int8_t* first, const ptrdiff_t* tap, const int32_t* wk, int32_t constant,
                   const OutputStage& out, int64_t o, int8_t* y) {
  const auto taps = static_cast<ptrdiff_t>(s.kh * s.kw), sx = static_cast<ptrdiff_t>(s.stride[1]);
  const auto ow = static_cast<ptrdiff_t>(s.ow), step = static_cast<ptrdiff_t>(s.ys[3]);
  ptrdiff_t ox = 0;
#if defined(KILN_HELIUM)
  if (out.q->no_min_multiplier && taps == 9 && s.kw == 3 && sx == 1 && s.dilation[1] == 1) {
    // 3x3 of stride 1 along the row: 4 pixels a step, the nine weights and three rows in registers.
    const ChannelRequantization lanes(*out.q, o, out);
    const int8_t *r0 = first + tap[0], *r1 = first + tap[3], *r2 = first + tap[6];
    const int32_t w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3], w4 = wk[4], w5 = wk[5], w6 = wk[6], w7 = wk[7];
    const int32_t w8 = wk[8];
    for (; ox < ow; ox += 4) {
      const mve_pred16_t p = vctp32q(static_cast<uint32_t>(ow - ox));
      int32x4_t acc = vdupq_n_s32(constant);
      acc = vmlaq_n_s32(acc, vldrbq_s32(r0 + ox), w0), acc = vmlaq_n_s32(acc, vldrbq_s32(r0 + ox + 1), w1);
      acc = vmlaq_n_s32(acc, vldrbq_s32(r0 + ox + 2), w2), acc = vmlaq_n_s32(acc, vldrbq_s32(r1 + ox), w3);
      acc = vmlaq_n_s32(acc, vldrbq_s32(r1 + ox + 1), w4), acc = vmlaq_n_s32(acc, vldrbq_s32(r1 + ox + 2), w5);
      acc = vmlaq_n_s32(acc, vldrbq_s32(r2 + ox), w6), acc = vmlaq_n_s32(acc, vldrbq_s32(r2 + ox + 1), w7);
      acc = vmlaq_n_s32(acc, vldrbq_s32(r2 + ox + 2), w8);
      store_lanes(y + ox * step, step, lanes.apply(acc, out.offset), p);
    }
  }
  if (out.q->no_min_multiplier) {  // 4 pixels a step
    const ChannelRequantization lanes(*out.q, o, out);
    const int32_t offset = out.offset;
    const uint32x4_t apart = vmulq_n_u32(vidupq_n_u32(0, 1), static_cast<uint32_t>(sx));
    for (; ox < ow; ox += 4) {
      const mve_pred16_t p = vctp32q(static_cast<uint32_t>(ow - ox));
      const int8_t* pixel = first + ox * sx;
      int32x4_t acc = vdupq_n_s32(constant);
      for (ptrdiff_t k = 0; k < taps; ++k) {
        acc = vmlaq_n_s32(acc, vldrbq_gather_offset_z_s32(pixel + tap[k], apart, p), wk[k]);
      }
      store_lanes(y + ox * step, step, lanes.apply(acc, offset), p);
    }
  }
#endif
  for (; ox + 2 <= ow; ox += 2) {  // two pixels share each weight
    const int8_t* pixel = first + ox * sx;
    uint32_t a0 = static_cast<uint32_t>(constant), a1 = a0;
    for (ptrdiff_t k = 0; k < taps; ++k) {
      a0 += static_cast<uint32_t>(pixel[tap[k]] * wk[k]);
      a1 += static_cast<uint32_t>(pixel[tap[k] + sx] * wk[k]);
    }
    y[ox * step] = out.scalar(static_cast<int32_t>(a0), o),
           y[(ox + 1) * step] = out.scalar(static_cast<int32_t>(a1), o);
  }
  for (; ox < ow; ++ox) {
    uint32_t a0 = static_cast<uint32_t>(constant);
    for (ptrdiff_t k = 0; k < taps; ++k) a0 += static_cast<uint32_t>(first[ox * sx + tap[k]] * wk[k]);
    y[ox * step] = out.scalar(static_cast<int32_t>(a0), o);
  }
}

// A depthwise convolution (weight IHWO) through the band: per output channel, as many of its
// input channel's padded rows as fit, then each output row of them.
void depthwise_band(const ConvShape& s, const int8_t* x, const int32_t* bias, const OutputStage& out, int8_t* y,
                    const int8_t* weight) {
  alignas(16) int8_t band[kBandBytes + 16];  // 16: what the last vector of a row reads past it
  int32_t wk[kMaxTaps];
  ptrdiff_t tap[kMaxTaps];
  const ptrdiff_t cols = band_cols(s, s.ow);
  const int64_t fit = (kBandBytes / cols - band_rows(s, 1)) / s.stride[0] + 1;
  const int64_t chunk = fit < s.oh ? fit : s.oh;
  const auto taps = static_cast<ptrdiff_t>(s.kh * s.kw);
  for (ptrdiff_t k = 0; k < taps; ++k) tap[k] = (k / s.kw) * s.dilation[0] * cols + (k % s.kw) * s.dilation[1];
  const auto pad = static_cast<int8_t>(-s.input_offset);
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t o = 0; o < s.cout; ++o) {
      uint32_t sum = 0;
      for (ptrdiff_t k = 0; k < taps; ++k) wk[k] = weight[k * s.cout + o], sum += static_cast<uint32_t>(wk[k]);
      const uint32_t start = bias != nullptr ? static_cast<uint32_t>(bias[o]) : 0u;
      const auto constant = static_cast<int32_t>(start + static_cast<uint32_t>(s.input_offset) * sum);
      const int8_t* plane = x + b * s.xs[0] + o / s.cout_g * s.xs[1];
      for (int64_t oy0 = 0; oy0 < s.oh; oy0 += chunk) {
        const int64_t oy1 = oy0 + chunk < s.oh ? oy0 + chunk : s.oh;
        fill_rows(s, plane, static_cast<ptrdiff_t>(oy0 * s.stride[0] - s.padding[0]), band_rows(s, oy1 - oy0),
                  static_cast<ptrdiff_t>(-s.padding[1]), cols, pad, band);
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          const int8_t* first = band + (oy - oy0) * s.stride[0] * cols;
          depthwise_row(s, first, tap, wk, constant, out, o, y + b * s.ys[0] + o * s.ys[1] + oy * s.ys[2]);
        }
      }
    }
  }
}

}  // namespace

Status cortex_m_quantized_depthwise_conv2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 14));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* w, input_tensor(args, 1, ScalarType::kChar));
  if (w->dim != 4 || w->sizes[0] != 1) return shape_mismatch(1, w->dim);
  KILN_TRY(int64_t multiplier, ranged_int(args, 6, 1, kMaxParam));
  ConvShape s{};
  s.cout = w->sizes[3], s.kh = w->sizes[1], s.kw = w->sizes[2], s.cin_g = 1, s.cout_g = multiplier;
  if (s.kh < 1 || s.kw < 1) return shape_mismatch(1);
  KILN_CHECK(conv_shape(args, *x, 1, &s));
  KILN_TRY(int64_t expected_out, checked_mul(s.c, multiplier, 6));
  if (s.cout != expected_out) return shape_mismatch(1);
  const int32_t* bias;
  Requantization q;
  Tensor* out;
  KILN_CHECK(conv_output(args, 9, 14, &s, &bias, &q, &out));
  const OutputStage stage{&q, static_cast<int32_t>(s.output_offset), {s.range[0], s.range[1]}};
  const int8_t* weight = s8(*w);
  if (depthwise_fits(s)) {
    depthwise_band(s, s8(*x), bias, stage, s8(*out), weight);
    return {};
  }
  const auto kw = static_cast<ptrdiff_t>(s.kw), cout = static_cast<ptrdiff_t>(s.cout);
  convolve_direct(s, s8(*x), bias, stage, s8(*out), [=](ptrdiff_t o, ptrdiff_t, ptrdiff_t ky, ptrdiff_t kx) {
    return static_cast<int32_t>(weight[(ky * kw + kx) * cout + o]);
  });
  return {};
}

}  // namespace kiln::runtime::kernels
