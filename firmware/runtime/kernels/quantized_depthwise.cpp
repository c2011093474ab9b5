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

// One output channel of the band path: its taps' weights, the constant each sum starts from
// (bias + input offset x the sum of its weights, mod 2^32: a padded tap reads the input's zero
// point, which the offset cancels), its requantization, and where its output rows go.
struct Channel {
  const int32_t* wk;
  int32_t constant;
  int32_t multiplier, shift;  // shift within 31 (tensor_requantization checks)
  int32_t offset, range[2];
  ptrdiff_t step, y_row;  // element steps of the output's pixels along a row, and of its rows
  ptrdiff_t cols, band_step;  // band row length; band rows between output rows (cols x stride)
#if defined(KILN_HELIUM)
  ChannelRequantization lanes;
#endif

  // fixed::requantize(acc, multiplier, shift) plus the offset, clamped.
  int8_t scalar(int32_t acc) const { return offset_clamp(fixed::requantize(acc, multiplier, shift), offset, range); }
};

#if defined(KILN_HELIUM)
// A 3x3 window of stride and dilation 1 along `rows` output rows of ow pixels from the band
// (each row readable 8 bytes past its ow + 2: the band's slack); 8 pixels a step, two
// accumulators sharing each weight. Contiguous: the output's pixels are adjacent bytes.
template <bool Contiguous>
__attribute__((noinline)) void rows3x3_helium(const int8_t* band, ptrdiff_t rows, const Channel& ch, ptrdiff_t ow,
                                              int8_t* y) {
  const int32_t* wk = ch.wk;
  const ptrdiff_t cols = ch.cols, step4 = 4 * ch.step;
  const uint32x4_t apart = vmulq_n_u32(vidupq_n_u32(0, 1), static_cast<uint32_t>(ch.step));
  for (; rows > 0; --rows, band += ch.band_step, y += ch.y_row) {
    const int8_t *r0 = band, *r1 = band + cols, *r2 = r1 + cols;
    int8_t* out = y;
    int32x4_t a, b;
    const auto step = [&]() {  // a, b: the requantized pixels 0-3 and 4-7 at r0, r1, r2
      a = vdupq_n_s32(ch.constant), b = a;
      const auto row = [&](const int8_t* r, const int32_t* w) {
        a = vmlaq_n_s32(a, vldrbq_s32(r), w[0]), b = vmlaq_n_s32(b, vldrbq_s32(r + 4), w[0]);
        a = vmlaq_n_s32(a, vldrbq_s32(r + 1), w[1]), b = vmlaq_n_s32(b, vldrbq_s32(r + 5), w[1]);
        a = vmlaq_n_s32(a, vldrbq_s32(r + 2), w[2]), b = vmlaq_n_s32(b, vldrbq_s32(r + 6), w[2]);
      };
      row(r0, wk), row(r1, wk + 3), row(r2, wk + 6);
      a = ch.lanes.apply(a, ch.offset), b = ch.lanes.apply(b, ch.offset);
    };
    ptrdiff_t left = ow;
    for (; left >= 8; left -= 8, r0 += 8, r1 += 8, r2 += 8, out += 2 * step4) {  // whole steps unpredicated
      step();
      if constexpr (Contiguous) {
        vstrbq_s32(out, a), vstrbq_s32(out + 4, b);
      } else {
        vstrbq_scatter_offset_s32(out, apart, a), vstrbq_scatter_offset_s32(out + step4, apart, b);
      }
    }
    if (left > 0) {
      step();
      const mve_pred16_t p0 = vctp32q(static_cast<uint32_t>(left));
      const mve_pred16_t p1 = vctp32q(static_cast<uint32_t>(left > 4 ? left - 4 : 0));
      if constexpr (Contiguous) {
        vstrbq_p_s32(out, a, p0), vstrbq_p_s32(out + 4, b, p1);
      } else {
        vstrbq_scatter_offset_p_s32(out, apart, a, p0), vstrbq_scatter_offset_p_s32(out + step4, apart, b, p1);
      }
    }
  }
}
#endif

#if !defined(KILN_HELIUM)
// rows3x3_helium's windows on the DSP and plain paths, two pixels a step. DSP: one word of each
// band row (x0..x3), SXTB16 giving (x0, x2) and (x1, x3): pixel 0 is SMLAD((x0, x2), (w0, w2))
// plus x1 w1 (SMLABB), pixel 1 SMLAD((x1, x3), (w0, w2)) plus x2 w1 (SMLATB). Plain C: the
// four bytes of each band row loaded once for both pixels.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))  // GCC's SLP of the two sums goes through the stack
#endif
__attribute__((noinline)) void
rows3x3_scalar(const int8_t* band, ptrdiff_t rows, const Channel& ch, ptrdiff_t ow, int8_t* y) {
  const int32_t* wk = ch.wk;
  const ptrdiff_t cols = ch.cols, step = ch.step;
#if defined(KILN_DSP)
  const auto pack = [](int32_t lo, int32_t hi) {
    return static_cast<int16x2_t>((static_cast<uint32_t>(lo) & 0xFFFFu) | (static_cast<uint32_t>(hi) << 16));
  };
  const int16x2_t a0 = pack(wk[0], wk[2]), a1 = pack(wk[3], wk[5]), a2 = pack(wk[6], wk[8]);
  const int16x2_t b0 = wk[1], b1 = wk[4], b2 = wk[7];
#endif
  for (; rows > 0; --rows, band += ch.band_step, y += ch.y_row) {
    const int8_t *r0 = band, *r1 = band + cols, *r2 = r1 + cols;
    ptrdiff_t ox = 0;
    for (; ox + 2 <= ow; ox += 2) {
#if defined(KILN_DSP)
      int32_t p0 = ch.constant, p1 = p0;
      const auto row = [&](const int8_t* r, int16x2_t a, int16x2_t b) {
        const uint32_t v = word_at(r + ox);
        const int16x2_t even = even_bytes(v), odd = odd_bytes(v);
        p0 = __smlabb(odd, b, __smlad(even, a, p0));
        p1 = __smlatb(even, b, __smlad(odd, a, p1));
      };
      row(r0, a0, b0), row(r1, a1, b1), row(r2, a2, b2);
#else
      uint32_t p0 = static_cast<uint32_t>(ch.constant), p1 = p0;
      const auto row = [&](const int8_t* r, const int32_t* w) {
        const int32_t x0 = r[ox], x1 = r[ox + 1], x2 = r[ox + 2], x3 = r[ox + 3];
        p0 += static_cast<uint32_t>(x0 * w[0]) + static_cast<uint32_t>(x1 * w[1]) + static_cast<uint32_t>(x2 * w[2]);
        p1 += static_cast<uint32_t>(x1 * w[0]) + static_cast<uint32_t>(x2 * w[1]) + static_cast<uint32_t>(x3 * w[2]);
      };
      row(r0, wk), row(r1, wk + 3), row(r2, wk + 6);
#endif
      y[ox * step] = ch.scalar(static_cast<int32_t>(p0)), y[(ox + 1) * step] = ch.scalar(static_cast<int32_t>(p1));
    }
    if (ox < ow) {
      uint32_t acc = static_cast<uint32_t>(ch.constant);
      for (int k = 0; k < 3; ++k) {
        acc += static_cast<uint32_t>(r0[ox + k] * wk[k] + r1[ox + k] * wk[3 + k] + r2[ox + k] * wk[6 + k]);
      }
      y[ox * step] = ch.scalar(static_cast<int32_t>(acc));
    }
  }
}
#endif

// One output row of a depthwise channel, any window: taps at tap[k] from each pixel's first
// (band columns apart by the stride), ow pixels at y + ox ch.step.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))  // GCC's SLP of the two sums goes through the stack
#endif
void depthwise_row(const int8_t* first, ptrdiff_t sx, const ptrdiff_t* tap, ptrdiff_t taps, const Channel& ch,
                   ptrdiff_t ow, int8_t* y) {
  const int32_t* wk = ch.wk;
  const ptrdiff_t step = ch.step;
  ptrdiff_t ox = 0;
#if defined(KILN_HELIUM)
  if (ch.multiplier != INT32_MIN) {  // 4 pixels a step
    const uint32x4_t apart = vmulq_n_u32(vidupq_n_u32(0, 1), static_cast<uint32_t>(sx));
    const uint32x4_t out_apart = vmulq_n_u32(vidupq_n_u32(0, 1), static_cast<uint32_t>(step));
    for (; ox < ow; ox += 4) {
      const mve_pred16_t p = vctp32q(static_cast<uint32_t>(ow - ox));
      const int8_t* pixel = first + ox * sx;
      int32x4_t acc = vdupq_n_s32(ch.constant);
      for (ptrdiff_t k = 0; k < taps; ++k) {
        acc = vmlaq_n_s32(acc, vldrbq_gather_offset_z_s32(pixel + tap[k], apart, p), wk[k]);
      }
      vstrbq_scatter_offset_p_s32(y + ox * step, out_apart, ch.lanes.apply(acc, ch.offset), p);
    }
  }
#endif
  for (; ox + 2 <= ow; ox += 2) {  // two pixels share each weight
    const int8_t* pixel = first + ox * sx;
    uint32_t a0 = static_cast<uint32_t>(ch.constant), a1 = a0;
    for (ptrdiff_t k = 0; k < taps; ++k) {
      a0 += static_cast<uint32_t>(pixel[tap[k]] * wk[k]);
      a1 += static_cast<uint32_t>(pixel[tap[k] + sx] * wk[k]);
    }
    y[ox * step] = ch.scalar(static_cast<int32_t>(a0)), y[(ox + 1) * step] = ch.scalar(static_cast<int32_t>(a1));
  }
  for (; ox < ow; ++ox) {
    uint32_t a0 = static_cast<uint32_t>(ch.constant);
    for (ptrdiff_t k = 0; k < taps; ++k) a0 += static_cast<uint32_t>(first[ox * sx + tap[k]] * wk[k]);
    y[ox * step] = ch.scalar(static_cast<int32_t>(a0));
  }
}

// dst[i] = src[i] for i < n (n small: a band row), without memcpy's call.
inline void copy_row(const int8_t* src, ptrdiff_t n, int8_t* dst) {
#if defined(KILN_HELIUM)
  for (ptrdiff_t i = 0; i < n; i += 16) {
    const mve_pred16_t p = vctp8q(static_cast<uint32_t>(n - i));
    vstrbq_p_s8(dst + i, vldrbq_z_s8(src + i, p), p);
  }
#else
  ptrdiff_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint32_t v;
    std::memcpy(&v, src + i, 4);  // one unaligned word load and store
    std::memcpy(dst + i, &v, 4);
  }
  for (; i < n; ++i) dst[i] = src[i];
#endif
}

// dst[i] = pad for i < n, without memset's call.
inline void pad_row(int8_t pad, ptrdiff_t n, int8_t* dst) {
#if defined(KILN_HELIUM)
  const int8x16_t v = vdupq_n_s8(pad);
  for (ptrdiff_t i = 0; i < n; i += 16) vstrbq_p_s8(dst + i, v, vctp8q(static_cast<uint32_t>(n - i)));
#else
  const uint32_t v = 0x01010101u * static_cast<uint8_t>(pad);
  ptrdiff_t i = 0;
  for (; i + 4 <= n; i += 4) std::memcpy(dst + i, &v, 4);
  for (; i < n; ++i) dst[i] = pad;
#endif
}

// Copies `rows` input rows from first_row of `plane` (steps s.xs) into band[r][col] (cols columns
// from input column -s.padding[1]); what lies outside the input is `pad`. A row's few padding
// bytes are stored one by one (GCC would make each such loop a call of memset).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
void fill_band(const ConvShape& s, const int8_t* plane, ptrdiff_t first_row, ptrdiff_t rows, ptrdiff_t cols, int8_t pad,
               int8_t* band) {
  const auto h = static_cast<ptrdiff_t>(s.h), w = static_cast<ptrdiff_t>(s.w);
  const auto first_col = static_cast<ptrdiff_t>(-s.padding[1]);
  const ptrdiff_t lo = first_col < 0 ? -first_col : 0;
  const ptrdiff_t hi = w - first_col < cols ? w - first_col : cols;  // columns [lo, hi) lie inside
  const auto row_step = static_cast<ptrdiff_t>(s.xs[2]), col_step = static_cast<ptrdiff_t>(s.xs[3]);
  for (ptrdiff_t r = 0; r < rows; ++r) {
    int8_t* dst = band + r * cols;
    const ptrdiff_t iy = first_row + r;
    if (iy < 0 || iy >= h || hi <= lo) {
      pad_row(pad, cols, dst);
      continue;
    }
    for (ptrdiff_t i = 0; i < lo; ++i) dst[i] = pad;
    for (ptrdiff_t i = hi; i < cols; ++i) dst[i] = pad;
    const int8_t* src = plane + iy * row_step + (first_col + lo) * col_step;
    if (col_step == 1) {
      copy_row(src, hi - lo, dst + lo);
    } else {
      copy_channels(src, col_step, hi - lo, dst + lo);
    }
  }
}

// A depthwise convolution (weight IHWO) through the band: per input channel, as many of its
// padded rows as fit, then each output row of each of its output channels.
void depthwise_band(const ConvShape& s, const int8_t* x, const int32_t* bias, const OutputStage& out, int8_t* y,
                    const int8_t* weight) {
  alignas(16) int8_t band[kBandBytes + 16];  // 16: what the last vectors of a row read past it
  int32_t wk[kMaxTaps];
  ptrdiff_t tap[kMaxTaps];
  const ptrdiff_t cols = band_cols(s, s.ow);
  const auto oh = static_cast<ptrdiff_t>(s.oh), ow = static_cast<ptrdiff_t>(s.ow);
  const auto sy = static_cast<ptrdiff_t>(s.stride[0]), sx = static_cast<ptrdiff_t>(s.stride[1]);
  const ptrdiff_t fit = (kBandBytes / cols - band_rows(s, 1)) / sy + 1;
  const ptrdiff_t chunk = fit < oh ? fit : oh;
  const auto taps = static_cast<ptrdiff_t>(s.kh * s.kw), kw = static_cast<ptrdiff_t>(s.kw);
  const auto cout = static_cast<ptrdiff_t>(s.cout), multiplier = static_cast<ptrdiff_t>(s.cout_g);
  for (ptrdiff_t k = 0; k < taps; ++k) {
    tap[k] = static_cast<ptrdiff_t>((k / kw) * s.dilation[0] * cols + (k % kw) * s.dilation[1]);
  }
  const bool three = taps == 9 && kw == 3 && sx == 1 && s.dilation[1] == 1 && s.dilation[0] == 1;
  const auto pad = static_cast<int8_t>(-s.input_offset);
  const auto input_offset = static_cast<uint32_t>(s.input_offset);
  Channel ch{};
  ch.wk = wk, ch.offset = out.offset, ch.range[0] = out.range[0], ch.range[1] = out.range[1];
  ch.step = static_cast<ptrdiff_t>(s.ys[3]), ch.y_row = static_cast<ptrdiff_t>(s.ys[2]);
  ch.cols = cols, ch.band_step = sy * cols;
  for (int64_t b = 0; b < s.n; ++b) {
    for (ptrdiff_t ci = 0; ci < static_cast<ptrdiff_t>(s.c); ++ci) {
      const int8_t* plane = x + b * s.xs[0] + ci * s.xs[1];
      for (ptrdiff_t oy0 = 0; oy0 < oh; oy0 += chunk) {
        const ptrdiff_t rows = oy0 + chunk < oh ? chunk : oh - oy0;
        fill_band(s, plane, oy0 * sy - static_cast<ptrdiff_t>(s.padding[0]), band_rows(s, rows), cols, pad, band);
        for (ptrdiff_t o = ci * multiplier; o < (ci + 1) * multiplier; ++o) {
          uint32_t sum = 0;
          for (ptrdiff_t k = 0; k < taps; ++k) wk[k] = weight[k * cout + o], sum += static_cast<uint32_t>(wk[k]);
          const uint32_t start = bias != nullptr ? static_cast<uint32_t>(bias[o]) : 0u;
          ch.constant = static_cast<int32_t>(start + input_offset * sum);
          ch.multiplier = out.q->multiplier(o), ch.shift = out.q->shift(o);
#if defined(KILN_HELIUM)
          ch.lanes = ChannelRequantization(ch.multiplier, ch.shift, out);
#endif
          int8_t* channel_out = y + b * s.ys[0] + o * s.ys[1] + oy0 * ch.y_row;
#if defined(KILN_HELIUM)
          if (three && ch.multiplier != INT32_MIN) {
            if (ch.step == 1) {
              rows3x3_helium<true>(band, rows, ch, ow, channel_out);
            } else {
              rows3x3_helium<false>(band, rows, ch, ow, channel_out);
            }
            continue;
          }
#else
          if (three) {
            rows3x3_scalar(band, rows, ch, ow, channel_out);
            continue;
          }
#endif
          for (ptrdiff_t r = 0; r < rows; ++r) {
            depthwise_row(band + r * ch.band_step, sx, tap, taps, ch, ow, channel_out + r * ch.y_row);
          }
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
