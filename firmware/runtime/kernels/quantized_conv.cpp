// cortex_m::quantized_conv2d.out (input, weight, bias?, stride, padding, dilation, input_offset,
//   output_offset, requantize_multipliers, requantize_shifts, activation_min, activation_max,
//   scratch, out): input NCHW, weight OHWI, groups C_in / I; zero padding (contributes 0);
//   multipliers and shifts Int tensors, one per output channel. Input and out tensor each in
//   either DimOrder (ExecuTorch's Cortex-M flow writes channels-last). The scratch argument is
//   ExecuTorch's and not read.
// As kiln.program.kernels.integer computes it (CMSIS-NN's arithmetic; fixed_point.h): each
// output's sum of products (plus its bias) wraps to int32 before the requantize, as CMSIS-NN's
// int32 accumulator; every path sums mod 2^32 (dot.h: Helium, DSP or plain C), so all give the
// same bits.
// The band path copies the windows of a strip of output pixels into a columns buffer on the stack
// (kBandBytes; Columns), channels last, the padding filled with the input's zero point
// (-input_offset), so that sum (x + a) w over a window is sum x w over its bytes plus a times the
// sum of the channel's weights (a constant per output channel): a window's bytes lie contiguous,
// as the OHWI weights do. Where the zero point is no int8 or a window does not fit, the direct
// path (conv_shape.h: convolve_direct) computes the same sums tap by tap. Both read the input and
// write the output through their steps in memory (ConvShape::xs, ys), so either DimOrder takes
// the same paths.
#include <cstddef>
#include <cstring>

#include "conv_shape.h"

namespace kiln::runtime::kernels {

namespace {

// Output pixels the columns buffer interleaves, and the bytes of its pieces: a Helium group's four
// vectors of x; elsewhere two pixels, each window one piece (piece_bytes).
#if defined(KILN_HELIUM)
constexpr ptrdiff_t kPixels = 4;
constexpr ptrdiff_t kPiece = 16;
ptrdiff_t piece_bytes(ptrdiff_t) { return kPiece; }
#else
constexpr ptrdiff_t kPixels = 2;
ptrdiff_t piece_bytes(ptrdiff_t window) { return (window + 3) & ~ptrdiff_t{3}; }  // whole words
#endif
constexpr int64_t kChunk = 128;         // output channels whose constants are held at once

// Whether the band path takes s: the padding's value is an int8, and the columns buffer holds
// the windows of one group of pixels.
bool band_fits(const ConvShape& s) {
  const auto window = static_cast<ptrdiff_t>(s.kh * s.kw * s.cin_g);
  const ptrdiff_t piece = piece_bytes(window);
  return pad_fits(s) && window <= kBandBytes && (window + piece - 1) / piece * piece * kPixels <= kBandBytes;
}

// The columns buffer: the windows of a strip of output pixels, kPixels at a time interleaved in
// pieces of `piece` bytes, so that one pointer reaches every pixel of a group:
//   group g, piece c, pixel p: bytes [piece c, piece (c + 1)) of pixel g kPixels + p's window
//   at cols + ((g pieces + c) kPixels + p) piece, where pieces = ceil(window / piece).
// A window is ky, kx, then channels last (as the OHWI weights).

struct Columns {
  int8_t* data;
  ptrdiff_t window, piece, pieces;  // bytes of a window, of a piece, and its pieces

  // Where byte i of the window of pixel px (of the strip) goes.
  int8_t* at(ptrdiff_t px, ptrdiff_t i) const {
    const auto p = static_cast<size_t>(px), k = static_cast<size_t>(i);
    const auto bytes = static_cast<size_t>(piece);
    const size_t at = (p / kPixels * static_cast<size_t>(pieces) + k / bytes) * kPixels + p % kPixels;
    return data + at * bytes + k % bytes;
  }
};

// Offsets from a window row's first tap to each of its kw cin bytes (kx, then channel), for a
// window of taps inside the input, where a row is whole 8-byte steps (Helium gathers 8 a step).
struct RowOffsets {
  static constexpr ptrdiff_t kMax = 512;
  uint16_t at[kMax];
  ptrdiff_t n = 0;  // 0: none (the row is too long or not of whole steps, or an offset passes 16 bits)

  explicit RowOffsets(const ConvShape& s) {
    const auto cin = static_cast<ptrdiff_t>(s.cin_g), channel = static_cast<ptrdiff_t>(s.xs[1]);
    const auto tap = static_cast<ptrdiff_t>(s.dilation[1] * s.xs[3]);  // between a row's taps
    const ptrdiff_t row = static_cast<ptrdiff_t>(s.kw) * cin;
    if (row > kMax || row % 8 != 0 || (s.kw - 1) * tap + (cin - 1) * channel >= 65536) return;
    for (ptrdiff_t i = 0; i < row; ++i) at[i] = static_cast<uint16_t>((i / cin) * tap + (i % cin) * channel);
    n = row;
  }
};

// dst[0, n) = value.
void fill_bytes(int8_t* dst, int8_t value, ptrdiff_t n) {
#if defined(KILN_HELIUM)
  for (ptrdiff_t i = 0; i < n; i += 16) vstrbq_p_s8(dst + i, vdupq_n_s8(value), vctp8q(static_cast<uint32_t>(n - i)));
#else
  std::memset(dst, value, static_cast<size_t>(n));
#endif
}

// The window of output pixel (oy, ox) into `window` (ky, kx, then channels last), from the
// group's planes; taps outside the input are `pad`.
void fill_window(const ConvShape& s, const int8_t* planes, const RowOffsets& rows, int64_t oy, int64_t ox, int8_t pad,
                 int8_t* window) {
  const auto h = static_cast<ptrdiff_t>(s.h), w = static_cast<ptrdiff_t>(s.w);
  const auto row = static_cast<ptrdiff_t>(s.xs[2]), column = static_cast<ptrdiff_t>(s.xs[3]);
  const auto cin = static_cast<ptrdiff_t>(s.cin_g), channel = static_cast<ptrdiff_t>(s.xs[1]);
  const int64_t top = oy * s.stride[0] - s.padding[0], bottom = top + (s.kh - 1) * s.dilation[0];
  const int64_t left = ox * s.stride[1] - s.padding[1], right = left + (s.kw - 1) * s.dilation[1];
  if (rows.n != 0 && top >= 0 && bottom < h && left >= 0 && right < w) {  // every tap inside
    for (int64_t ky = 0; ky < s.kh; ++ky, window += rows.n) {
      const int8_t* from = planes + (top + ky * s.dilation[0]) * row + left * column;
#if defined(KILN_HELIUM)
      const auto* base = reinterpret_cast<const uint8_t*>(from);
      for (ptrdiff_t i = 0; i < rows.n; i += 8) {
        vstrbq_u16(reinterpret_cast<uint8_t*>(window + i), vldrbq_gather_offset_u16(base, vld1q_u16(rows.at + i)));
      }
#else
      for (ptrdiff_t i = 0; i < rows.n; ++i) window[i] = from[rows.at[i]];
#endif
    }
    return;
  }
  for (int64_t ky = 0; ky < s.kh; ++ky) {
    const auto iy = static_cast<ptrdiff_t>(top + ky * s.dilation[0]);
    for (int64_t kx = 0; kx < s.kw; ++kx, window += cin) {
      const auto ix = static_cast<ptrdiff_t>(left + kx * s.dilation[1]);
      if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
        fill_bytes(window, pad, cin);
      } else {
        copy_channels(planes + iy * row + ix * column, channel, cin, window);
      }
    }
  }
}

// The windows of output pixels [ox0, ox1) of row oy into `cols` (through `window`, a scratch of
// cols.pieces pieces), from the group's planes; taps outside the input are `pad`.
void fill_columns(const ConvShape& s, const int8_t* planes, const RowOffsets& rows, int64_t oy, int64_t ox0,
                  int64_t ox1, int8_t pad, const Columns& cols, int8_t* window) {
  for (int64_t ox = ox0; ox < ox1; ++ox) {
    fill_window(s, planes, rows, oy, ox, pad, window);
    int8_t* dst = cols.at(static_cast<ptrdiff_t>(ox - ox0), 0);
#if defined(KILN_HELIUM)
    for (ptrdiff_t c = 0; c < cols.pieces; ++c, dst += kPixels * kPiece) vst1q_s8(dst, vld1q_s8(window + c * kPiece));
#else
    std::memcpy(dst, window, static_cast<size_t>(cols.window));  // one piece
#endif
  }
}

#if defined(KILN_HELIUM)
// sum[j] lane p = the products of `pieces` whole pieces of the group's 4 pixels (from `group`) and
// weight row j (from w + j n), R 1 or 2 (one row then summed twice). In assembly: GCC 12 spills
// the eight sums, and VMLADAV takes only even registers, which the sums occupy here (r0 .. r12,
// lr), the pointers the odd ones.
template <int R>
[[gnu::always_inline]] inline void helium_pieces(const int8_t* group, const int8_t* w, ptrdiff_t n, ptrdiff_t pieces,
                                                 int32x4_t sum[R]) {
  register int32_t a0 asm("r0") = 0, a1 asm("r2") = 0, a2 asm("r4") = 0, a3 asm("r6") = 0;
  register const int8_t* x asm("r1") = group;
  register const int8_t* w0 asm("r3") = w;
  register ptrdiff_t count asm("r9") = pieces;
  register int32_t b0 asm("r8") = 0, b1 asm("r10") = 0, b2 asm("r12") = 0, b3 asm("lr") = 0;
  register const int8_t* w1 asm("r5") = w + (R - 1) * n;  // one row (R 1): the same row twice
  asm volatile(
      "cmp %[count], #0\n"
      "beq 2f\n"
      "1:\n"
      "vldrb.8 q0, [%[x]], #16\n"
      "vldrb.8 q1, [%[x]], #16\n"
      "vldrb.8 q2, [%[x]], #16\n"
      "vldrb.8 q3, [%[x]], #16\n"
      "vldrb.8 q4, [%[w0]], #16\n"
      "vmladava.s8 %[a0], q0, q4\n"
      "vmladava.s8 %[a1], q1, q4\n"
      "vmladava.s8 %[a2], q2, q4\n"
      "vmladava.s8 %[a3], q3, q4\n"
      "vldrb.8 q4, [%[w1]], #16\n"
      "vmladava.s8 %[b0], q0, q4\n"
      "vmladava.s8 %[b1], q1, q4\n"
      "vmladava.s8 %[b2], q2, q4\n"
      "vmladava.s8 %[b3], q3, q4\n"
      "subs %[count], #1\n"
      "bne 1b\n"
      "2:\n"
      : [x] "+r"(x), [w0] "+r"(w0), [w1] "+r"(w1), [count] "+r"(count), [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2),
        [a3] "+r"(a3), [b0] "+r"(b0), [b1] "+r"(b1), [b2] "+r"(b2), [b3] "+r"(b3)
      :
      : "q0", "q1", "q2", "q3", "q4", "memory", "cc");
  sum[0] = vsetq_lane_s32(a3, vsetq_lane_s32(a2, vsetq_lane_s32(a1, vdupq_n_s32(a0), 1), 2), 3);
  sum[R - 1] = vsetq_lane_s32(b3, vsetq_lane_s32(b2, vsetq_lane_s32(b1, vdupq_n_s32(b0), 1), 2), 3);
}
#endif

// The sums of the kPixels windows of a group (from `group`) against R weight rows w, w + window,
// ...: acc[j kPixels + p], each mod 2^32. A piece past the window's end is read whole from the group
// and multiplied by zero weights.
template <int R>
[[gnu::always_inline]] inline void group_sums(const int8_t* group, const Columns& cols, const int8_t* w,
                                              int32_t acc[kPixels * R]) {
  int32_t sum[kPixels * R];
  const ptrdiff_t n = cols.window;
#if defined(KILN_HELIUM)
  const ptrdiff_t whole = n / kPiece;  // whole pieces (helium_pieces), then the last one's weights predicated
  int32x4_t v[R];
  helium_pieces<R>(group, w, n, whole, v);
  group += whole * kPixels * kPiece;
  if (n % kPiece != 0) {
    const mve_pred16_t lanes = vctp8q(static_cast<uint32_t>(n % kPiece));
    const int8x16_t x0 = vld1q_s8(group), x1 = vld1q_s8(group + 16), x2 = vld1q_s8(group + 32);
    const int8x16_t x3 = vld1q_s8(group + 48);
    for (int j = 0; j < R; ++j) {
      const int8x16_t wv = vldrbq_z_s8(w + j * n + whole * kPiece, lanes);
      const int32_t tail[4] = {vmladavq_s8(x0, wv), vmladavq_s8(x1, wv), vmladavq_s8(x2, wv), vmladavq_s8(x3, wv)};
      v[j] = vaddq_s32(v[j], vld1q_s32(tail));
    }
  }
  for (int j = 0; j < R; ++j) vst1q_s32(acc + j * kPixels, v[j]);
  return;
#else
  // Two pixels (x0, x1) against one or two weight rows (w0, w1): four sums in registers.
  const int8_t* w0 = w;
  const int8_t* w1 = w + (R - 1) * n;
  uint32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;  // s<pixel><row>
  for (ptrdiff_t i = 0; i < n; i += cols.piece, group += kPixels * cols.piece) {
    const ptrdiff_t len = n - i < cols.piece ? n - i : cols.piece;
    const int8_t* x0 = group;
    const int8_t* x1 = group + cols.piece;
    ptrdiff_t k = 0;
#if defined(KILN_DSP)
    const int8_t* c0 = w0 + i;
    const int8_t* c1 = w1 + i;
    for (const int8_t* end = x0 + (len & ~ptrdiff_t{3}); x0 < end; x0 += 4, x1 += 4, c0 += 4, c1 += 4) {
      const uint32_t a = word_at(x0), b = word_at(x1), c = word_at(c0);
      const int16x2_t a02 = even_bytes(a), a13 = odd_bytes(a), b02 = even_bytes(b), b13 = odd_bytes(b);
      const int16x2_t c02 = even_bytes(c), c13 = odd_bytes(c);
      s00 = static_cast<uint32_t>(__smlad(a13, c13, __smlad(a02, c02, static_cast<int32_t>(s00))));
      s10 = static_cast<uint32_t>(__smlad(b13, c13, __smlad(b02, c02, static_cast<int32_t>(s10))));
      if constexpr (R > 1) {
        const uint32_t d = word_at(c1);
        const int16x2_t d02 = even_bytes(d), d13 = odd_bytes(d);
        s01 = static_cast<uint32_t>(__smlad(a13, d13, __smlad(a02, d02, static_cast<int32_t>(s01))));
        s11 = static_cast<uint32_t>(__smlad(b13, d13, __smlad(b02, d02, static_cast<int32_t>(s11))));
      }
    }
    k = len & ~ptrdiff_t{3};
    x0 = group, x1 = group + cols.piece;
#endif
    for (; k < len; ++k) {
      const int32_t a = x0[k], b = x1[k], c = w0[i + k];
      s00 += static_cast<uint32_t>(a * c), s10 += static_cast<uint32_t>(b * c);
      if constexpr (R > 1) {
        const int32_t d = w1[i + k];
        s01 += static_cast<uint32_t>(a * d), s11 += static_cast<uint32_t>(b * d);
      }
    }
  }
  sum[0] = static_cast<int32_t>(s00), sum[1] = static_cast<int32_t>(s10);
  if constexpr (R > 1) sum[2] = static_cast<int32_t>(s01), sum[3] = static_cast<int32_t>(s11);
#endif
  for (int k = 0; k < kPixels * R; ++k) acc[k] = sum[k];
}

// Channels [o, o + R) of the n pixels whose windows `cols` holds; outputs from y (channel j, pixel
// p at y + j steps.channel + p steps.pixel).
template <int R>
[[gnu::noinline]] void column_strip(const Columns& cols, ptrdiff_t n, const int8_t* w, const int32_t* constant,
                                    const OutputStage& out, int64_t o, int8_t* y, Steps steps) {
  const ptrdiff_t group_bytes = cols.pieces * kPixels * cols.piece;
#if defined(KILN_HELIUM)
  if (out.q->no_min_multiplier) {  // 4 pixels of a channel a vector
    const ChannelRequantization first(*out.q, o, out);
    const ChannelRequantization second = R > 1 ? ChannelRequantization(*out.q, o + 1, out) : first;
    const int32_t offset = out.offset;
    const int32_t k0 = constant[0], k1 = constant[R - 1];
    for (ptrdiff_t px = 0; px < n; px += kPixels) {
      int32_t acc[kPixels * R];
      group_sums<R>(cols.data + px / kPixels * group_bytes, cols, w, acc);
      const mve_pred16_t valid = vctp32q(static_cast<uint32_t>(n - px));
      int8_t* pixel = y + px * steps.pixel;
      store_lanes(pixel, steps.pixel, first.apply(vaddq_n_s32(vld1q_s32(acc), k0), offset), valid);
      if constexpr (R > 1) {
        const int32x4_t v = second.apply(vaddq_n_s32(vld1q_s32(acc + kPixels), k1), offset);
        store_lanes(pixel + steps.channel, steps.pixel, v, valid);
      }
    }
    return;
  }
#endif
  int32_t multiplier[R], shift[R];
  for (int j = 0; j < R; ++j) multiplier[j] = out.q->multiplier(o + j), shift[j] = out.q->shift(o + j);
  for (ptrdiff_t px = 0; px < n; px += kPixels) {
    int32_t acc[kPixels * R];
    group_sums<R>(cols.data + px / kPixels * group_bytes, cols, w, acc);
    const ptrdiff_t count = n - px < kPixels ? n - px : kPixels;
    for (int j = 0; j < R; ++j) {
      for (ptrdiff_t p = 0; p < count; ++p) {
        const auto sum =
            static_cast<int32_t>(static_cast<uint32_t>(acc[j * kPixels + p]) + static_cast<uint32_t>(constant[j]));
        y[(px + p) * steps.pixel + j * steps.channel] =
            offset_clamp(fixed::requantize(sum, multiplier[j], shift[j]), out.offset, out.range);
      }
    }
  }
}

// A convolution through the columns buffer: per output row, strips of output pixels whose windows
// fit it (fill_columns); per pair of output channels (then 1), kPixels pixels at a time.
void convolve_band(const ConvShape& s, const int8_t* x, const int32_t* bias, const OutputStage& out, int8_t* y,
                   const int8_t* weight) {
  alignas(16) int8_t band[kBandBytes];
  alignas(16) int8_t window_bytes[kBandBytes / kPixels];
  std::memset(band, 0, sizeof band);  // what a group's last pieces and pixels hold beyond the windows
  std::memset(window_bytes, 0, sizeof window_bytes);
  int32_t constant[kChunk];           // per output channel: bias + input offset x the sum of its weights
  const auto cin = static_cast<ptrdiff_t>(s.cin_g), window = static_cast<ptrdiff_t>(s.kh * s.kw) * cin;
  const ptrdiff_t piece = piece_bytes(window);
  const Columns cols{band, window, piece, (window + piece - 1) / piece};
  const Steps steps{static_cast<ptrdiff_t>(s.ys[1]), static_cast<ptrdiff_t>(s.ys[3])};
  const int64_t fit = kBandBytes / (cols.pieces * piece * kPixels) * kPixels, strip = fit < s.ow ? fit : s.ow;
  const auto pad = static_cast<int8_t>(-s.input_offset);
  const auto a = static_cast<uint32_t>(s.input_offset);
  const RowOffsets rows(s);
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t o0 = 0, o1 = 0; o0 < s.cout; o0 = o1) {  // chunks of kChunk channels within a group
      const int64_t group = o0 / s.cout_g, group_end = (group + 1) * s.cout_g;
      o1 = o0 + kChunk < group_end ? o0 + kChunk : group_end;
      for (int64_t o = o0; o < o1; ++o) {
        const uint32_t start = bias != nullptr ? static_cast<uint32_t>(bias[o]) : 0u;
        constant[o - o0] =
            static_cast<int32_t>(start + a * static_cast<uint32_t>(byte_sum(weight + o * window, window)));
      }
      const int8_t* planes = x + b * s.xs[0] + group * cin * s.xs[1];
      for (int64_t oy = 0; oy < s.oh; ++oy) {
        for (int64_t ox0 = 0; ox0 < s.ow; ox0 += strip) {
          const int64_t ox1 = ox0 + strip < s.ow ? ox0 + strip : s.ow;
          const auto n = static_cast<ptrdiff_t>(ox1 - ox0);
          fill_columns(s, planes, rows, oy, ox0, ox1, pad, cols, window_bytes);
          for (int64_t o = o0; o < o1;) {
            int8_t* first = y + b * s.ys[0] + o * s.ys[1] + oy * s.ys[2] + ox0 * s.ys[3];
            const int8_t* w = weight + o * window;
            const int32_t* k = constant + (o - o0);
            if (o + 2 <= o1) {
              column_strip<2>(cols, n, w, k, out, o, first, steps);
              o += 2;
            } else {
              column_strip<1>(cols, n, w, k, out, o, first, steps);
              o += 1;
            }
          }
        }
      }
    }
  }
}

}  // namespace

Status cortex_m_quantized_conv2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 13));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* w, input_tensor(args, 1, ScalarType::kChar));
  if (w->dim != 4 || w->sizes[3] < 1) return shape_mismatch(1, w->dim);
  ConvShape s{};
  s.cout = w->sizes[0], s.kh = w->sizes[1], s.kw = w->sizes[2], s.cin_g = w->sizes[3];
  if (s.kh < 1 || s.kw < 1) return shape_mismatch(1);
  KILN_CHECK(conv_shape(args, *x, 0, &s));
  if (s.c % s.cin_g != 0) return shape_mismatch(1);
  const int64_t groups = s.c / s.cin_g;
  if (groups < 1 || s.cout % groups != 0) return shape_mismatch(1);
  s.cout_g = s.cout / groups;
  const int32_t* bias;
  Requantization q;
  Tensor* out;
  KILN_CHECK(conv_output(args, 8, 13, &s, &bias, &q, &out));
  const OutputStage stage{&q, static_cast<int32_t>(s.output_offset), {s.range[0], s.range[1]}};
  const int8_t* weight = s8(*w);
  if (band_fits(s)) {
    convolve_band(s, s8(*x), bias, stage, s8(*out), weight);
    return {};
  }
  const auto kh = static_cast<ptrdiff_t>(s.kh), kw = static_cast<ptrdiff_t>(s.kw);
  const auto cin = static_cast<ptrdiff_t>(s.cin_g);
  convolve_direct(s, s8(*x), bias, stage, s8(*out), [=](ptrdiff_t o, ptrdiff_t ci, ptrdiff_t ky, ptrdiff_t kx) {
    return static_cast<int32_t>(weight[((o * kh + ky) * kw + kx) * cin + ci]);
  });
  return {};
}

}  // namespace kiln::runtime::kernels
