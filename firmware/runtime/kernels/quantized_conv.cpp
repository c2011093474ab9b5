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
// The band path copies a band of input rows (all of a group's input channels, the padding filled
// with the input's zero point -input_offset) into a buffer on the stack once, channels last
// (NHWC), so that each window of it is kh runs of contiguous bytes; then copies the windows of a
// run of output pixels into a columns buffer laid out for the code path's MAC loop (group_bytes
// below), and computes each pair of output channels over them: sum (x + a) w over a
// window is sum x w over its bytes plus a times the sum of the channel's weights (a constant per
// output channel), the windows' bytes in the OHWI weights' order. Where the zero point is no int8
// or a window does not fit, the direct path (conv_shape.h: convolve_direct) computes the same sums
// tap by tap. Both read the input and write the output through their steps in memory
// (ConvShape::xs, ys), so either DimOrder takes the same paths. Stack: the band (kBandBytes), the
// columns (kColumnsBytes), a window's scratch and, on the DSP and plain paths, a channel pair's
// widened or interleaved weights: about 10.5 KiB on Helium, 12 KiB plain, 13.6 KiB on the DSP path.
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "conv_shape.h"

namespace kiln::runtime::kernels {

namespace {

constexpr ptrdiff_t kColumnsBytes = 6144;  // the columns buffer on the stack
constexpr ptrdiff_t kMaxWindow = 768;      // a window's bytes (kh kw C_in / groups) the band path takes
constexpr ptrdiff_t kSlack = 16;           // bytes a window's last vector or word reads past its end
constexpr int64_t kChunk = 128;            // output channels whose constants are held at once

// The columns buffer: groups of kPixels output pixels' windows, group_bytes(window) bytes each,
// in the order the path's MAC loop reads them:
//   Helium: 16-byte pieces, piece c of pixel p at group + (4 c + p) 16 (one pointer, 4 vectors);
//   DSP: per 4 window bytes k..k+3, the int16 pairs (x[k], x[k+2]) and (x[k+1], x[k+3]) of
//        pixel 0 then pixel 1 (SXTB16's order, for SMLAD), at group + 4 k (16 bytes a step);
//   plain: byte k of pixel p at group + 4 k + p.
// Bytes past a window (up to the group's end) are multiplied by zero weights.
#if defined(KILN_HELIUM)
constexpr ptrdiff_t kPixels = 4;
constexpr ptrdiff_t kAlign = 16;  // a segment copied straight into the columns: whole pieces
ptrdiff_t group_bytes(ptrdiff_t window) { return (window + 15) / 16 * 64; }
#elif defined(KILN_DSP)
constexpr ptrdiff_t kPixels = 2;
constexpr ptrdiff_t kAlign = 4;
ptrdiff_t group_bytes(ptrdiff_t window) { return (window + 3) / 4 * 16; }
#else
constexpr ptrdiff_t kPixels = 4;
constexpr ptrdiff_t kAlign = 1;
ptrdiff_t group_bytes(ptrdiff_t window) { return window * 4; }
#endif

// Where pixel p's window starts in its group.
int8_t* window_start(int8_t* group, ptrdiff_t p) {
#if defined(KILN_HELIUM)
  return group + p * 16;
#elif defined(KILN_DSP)
  return group + p * 8;
#else
  return group + p;
#endif
}

// The next len bytes of a window (those before a multiple of kAlign) from src into its group at
// dst (window_start, or what the previous call returned); returns where the bytes after them go.
// Reads up to kAlign - 1 bytes past src + len.
int8_t* store_run(const int8_t* src, ptrdiff_t len, int8_t* dst) {
#if defined(KILN_HELIUM)
  for (ptrdiff_t i = 0; i < len; i += 16, dst += 64) vst1q_s8(dst, vld1q_s8(src + i));
#elif defined(KILN_DSP)
  for (ptrdiff_t i = 0; i < len; i += 4, dst += 16) {
    const uint32_t v = word_at(src + i);
    auto* words = reinterpret_cast<uint32_t*>(dst);
    words[0] = static_cast<uint32_t>(even_bytes(v)), words[1] = static_cast<uint32_t>(odd_bytes(v));
  }
#else
  for (ptrdiff_t i = 0; i < len; ++i, dst += 4) *dst = src[i];
#endif
  return dst;
}

// dst[0, n) = src[0, n) (n small: a window's segment).
void copy_bytes(int8_t* dst, const int8_t* src, ptrdiff_t n) {
#if defined(KILN_HELIUM)
  for (ptrdiff_t i = 0; i < n; i += 16) {
    const mve_pred16_t p = vctp8q(static_cast<uint32_t>(n - i));
    vstrbq_p_s8(dst + i, vldrbq_z_s8(src + i, p), p);
  }
#else
  std::memcpy(dst, src, static_cast<size_t>(n));
#endif
}

// dst[0, n) = value.
void fill_bytes(int8_t* dst, int8_t value, ptrdiff_t n) {
#if defined(KILN_HELIUM)
  for (ptrdiff_t i = 0; i < n; i += 16) vstrbq_p_s8(dst + i, vdupq_n_s8(value), vctp8q(static_cast<uint32_t>(n - i)));
#else
  std::memset(dst, value, static_cast<size_t>(n));
#endif
}

// How the band path covers the output: bands of `strip` output columns (all of a row where they
// fit) by `rows` output rows, each band's input at most kBandBytes, channels last.
struct BandPlan {
  int64_t strip = 0, rows = 0;
  bool pointwise = false;  // 1x1 taps, no padding: windows straight from the input, no band
};

// Whether the band path takes s (*plan: how): a window at most kMaxWindow bytes, and either a
// pointwise convolution or the padding's value an int8 and the input under one output pixel fits
// a band.
bool plan_band(const ConvShape& s, BandPlan* plan) {
  if (s.kh * s.kw * s.cin_g > kMaxWindow) return false;
  if (s.kh == 1 && s.kw == 1 && s.padding[0] == 0 && s.padding[1] == 0) {
    plan->strip = s.ow, plan->rows = s.oh, plan->pointwise = true;
    return true;
  }
  if (!pad_fits(s)) return false;
  const ptrdiff_t rows1 = band_rows(s, 1), span = band_cols(s, 1), cin = static_cast<ptrdiff_t>(s.cin_g);
  if (rows1 > kBandBytes || span > kBandBytes || int64_t{rows1} * span * cin > kBandBytes) return false;
  const ptrdiff_t cols_fit = kBandBytes / (rows1 * cin);  // >= span
  const int64_t strip_fit = (cols_fit - span) / s.stride[1] + 1;
  plan->strip = strip_fit < s.ow ? strip_fit : s.ow;
  const ptrdiff_t row_bytes = band_cols(s, plan->strip) * cin;
  const int64_t rows_fit = (kBandBytes / row_bytes - rows1) / s.stride[0] + 1;
  plan->rows = rows_fit < s.oh ? rows_fit : s.oh;
  return true;
}

// band[(r cols + c) cin + ci] = channel ci of the group's planes at input row first_row + r,
// column first_col + c, for r < rows, c < cols; `pad` outside the input.
void fill_band(const ConvShape& s, const int8_t* planes, ptrdiff_t first_row, ptrdiff_t rows, ptrdiff_t first_col,
               ptrdiff_t cols, int8_t pad, int8_t* band) {
  const auto h = static_cast<ptrdiff_t>(s.h), w = static_cast<ptrdiff_t>(s.w), cin = static_cast<ptrdiff_t>(s.cin_g);
  const auto channel = static_cast<ptrdiff_t>(s.xs[1]), column = static_cast<ptrdiff_t>(s.xs[3]);
  const ptrdiff_t lo = first_col < 0 ? -first_col : 0;
  const ptrdiff_t hi = w - first_col < cols ? w - first_col : cols;  // columns [lo, hi) lie inside
  for (ptrdiff_t r = 0; r < rows; ++r) {
    int8_t* dst = band + r * cols * cin;
    const ptrdiff_t iy = first_row + r;
    if (iy < 0 || iy >= h || hi <= lo) {
      fill_bytes(dst, pad, cols * cin);
      continue;
    }
    if (lo > 0) fill_bytes(dst, pad, lo * cin);
    if (hi < cols) fill_bytes(dst + hi * cin, pad, (cols - hi) * cin);
    const int8_t* src = planes + iy * s.xs[2] + (first_col + lo) * column;
    if (channel == 1 && column == cin) {  // channels last, a row's pixels adjacent
      std::memcpy(dst + lo * cin, src, static_cast<size_t>((hi - lo) * cin));
      continue;
    }
#if defined(KILN_HELIUM)
    if (cin % 8 == 0 && channel > 0 && channel < 65536 / 8) {  // 8 channels a gather
      const uint16x8_t apart = vmulq_n_u16(vidupq_n_u16(0, 1), static_cast<uint16_t>(channel));
      for (ptrdiff_t c = lo; c < hi; ++c, src += column) {
        const auto* from = reinterpret_cast<const uint8_t*>(src);
        auto* to = reinterpret_cast<uint8_t*>(dst + c * cin);
        for (ptrdiff_t ci = 0; ci < cin; ci += 8, from += 8 * channel) {
          vstrbq_u16(to + ci, vldrbq_gather_offset_u16(from, apart));
        }
      }
      continue;
    }
#endif
    for (ptrdiff_t c = lo; c < hi; ++c, src += column) copy_channels(src, channel, cin, dst + c * cin);
  }
}

// The windows of n output pixels of a pointwise convolution (plan_band) into `columns`: pixel i
// at input row (r0 + (c0 + i) / width) stride[0], column ((c0 + i) % width) stride[1] of the
// group's planes; `scratch` (kMaxWindow + kSlack bytes) gathers a window that is not whole kAlign
// pieces in memory.
void fill_pointwise(const ConvShape& s, const int8_t* planes, int64_t r0, int64_t c0, int64_t width, ptrdiff_t n,
                    int8_t* columns, int8_t* scratch) {
  const auto cin = static_cast<ptrdiff_t>(s.cin_g), channel = static_cast<ptrdiff_t>(s.xs[1]);
  const auto sy = static_cast<ptrdiff_t>(s.stride[0] * s.xs[2]), sx = static_cast<ptrdiff_t>(s.stride[1] * s.xs[3]);
  const ptrdiff_t gb = group_bytes(cin);
  const bool direct = channel == 1 && cin % kAlign == 0;
#if !defined(KILN_HELIUM) && !defined(KILN_DSP)
  static_cast<void>(scratch);
#endif
#if defined(KILN_HELIUM)
  const bool gather = cin % 8 == 0 && channel > 0 && channel < 65536 / 8;
  const uint16x8_t apart = vmulq_n_u16(vidupq_n_u16(0, 1), static_cast<uint16_t>(channel));
#endif
  auto r = static_cast<ptrdiff_t>(r0), c = static_cast<ptrdiff_t>(c0);
  ptrdiff_t i = 0;
#if !defined(KILN_HELIUM) && !defined(KILN_DSP)
  if (sx == 1 && sy == width) {  // the pixels adjacent in each channel's plane: 4 bytes a copy
    const int8_t* first = planes + r * sy + c;
    for (; i + 4 <= n; i += 4) {
      int8_t* group = columns + i / 4 * gb;
      const int8_t* src = first + i;
      for (ptrdiff_t ci = 0; ci < cin; ++ci, src += channel) std::memcpy(group + ci * 4, src, 4);
    }
    r += (c + i) / width, c = (c + i) % width;
  }
#endif
  for (; i < n; ++i) {
    const int8_t* src = planes + r * sy + c * sx;
    int8_t* group = columns + i / kPixels * gb;
    const ptrdiff_t p = i % kPixels;
    if (direct) {
      store_run(src, cin, window_start(group, p));
#if defined(KILN_HELIUM)
    } else if (gather) {  // 8 channels a gather, straight into the pixel's pieces
      const auto* from = reinterpret_cast<const uint8_t*>(src);
      for (ptrdiff_t ci = 0; ci < cin; ci += 8, from += 8 * channel) {
        vstrbq_u16(reinterpret_cast<uint8_t*>(group + (ci / 16 * 4 + p) * 16 + ci % 16),
                   vldrbq_gather_offset_u16(from, apart));
      }
    } else {
      copy_channels(src, channel, cin, scratch);
      store_run(scratch, cin, window_start(group, p));
#elif defined(KILN_DSP)
    } else {
      copy_channels(src, channel, cin, scratch);
      store_run(scratch, cin, window_start(group, p));
#else
    } else {  // byte by byte straight into the pixel's column
      int8_t* dst = window_start(group, p);
      for (ptrdiff_t ci = 0; ci < cin; ++ci) dst[ci * 4] = src[ci * channel];
#endif
    }
    if (++c == width) c = 0, ++r;
  }
}

// The windows of n output pixels into `columns`: pixel i's first tap at band row
// (r0 + (c0 + i) / width) stride[0], column ((c0 + i) % width) stride[1], the band's rows
// row_bytes apart; `scratch` (kMaxWindow + kSlack bytes) assembles a window whose segments are
// not whole kAlign pieces.
void fill_columns(const ConvShape& s, const int8_t* band, ptrdiff_t row_bytes, int64_t r0, int64_t c0, int64_t width,
                  ptrdiff_t n, int8_t* columns, int8_t* scratch) {
  const auto cin = static_cast<ptrdiff_t>(s.cin_g), kh = static_cast<ptrdiff_t>(s.kh);
  const auto kw = static_cast<ptrdiff_t>(s.kw), window = kh * kw * cin;
  const bool joined = s.dilation[1] == 1;  // a window row's taps adjacent: one segment
  const ptrdiff_t segment = joined ? kw * cin : cin, per_row = joined ? 1 : kw;
  const ptrdiff_t tap_step = static_cast<ptrdiff_t>(s.dilation[1]) * cin;
  const ptrdiff_t ky_step = static_cast<ptrdiff_t>(s.dilation[0]) * row_bytes;
  const bool whole = kh * per_row == 1 || segment % kAlign == 0;
  const ptrdiff_t gb = group_bytes(window);
  const auto sy = static_cast<ptrdiff_t>(s.stride[0]) * row_bytes, sx = static_cast<ptrdiff_t>(s.stride[1]) * cin;
  auto r = static_cast<ptrdiff_t>(r0), c = static_cast<ptrdiff_t>(c0);
  for (ptrdiff_t i = 0; i < n; ++i) {
    const int8_t* origin = band + r * sy + c * sx;
    int8_t* dst = window_start(columns + i / kPixels * gb, i % kPixels);
    ptrdiff_t k = 0;
    for (ptrdiff_t ky = 0; ky < kh; ++ky) {
      const int8_t* tap = origin + ky * ky_step;
      for (ptrdiff_t j = 0; j < per_row; ++j, k += segment, tap += tap_step) {
        if (whole) {
          dst = store_run(tap, segment, dst);
        } else {
          copy_bytes(scratch + k, tap, segment);
        }
      }
    }
    if (!whole) store_run(scratch, window, dst);
    if (++c == width) c = 0, ++r;
  }
}

// fixed::requantize and offset_clamp of one channel, its parameters hoisted: the left shift, the
// right shift `right` >= 0, and the rounding term 2^(30 + right) as two 32-bit words.
struct ScalarRequantization {
  int32_t multiplier, left, right;
  uint32_t round_low, round_high;
  int32_t offset, low, high;

  ScalarRequantization(const OutputStage& out, int64_t channel)
      : multiplier(out.q->multiplier(channel)),
        left(out.q->shift(channel) > 0 ? out.q->shift(channel) : 0),
        right(out.q->shift(channel) < 0 ? -out.q->shift(channel) : 0),
        round_low(right < 2 ? uint32_t{1} << static_cast<uint32_t>(30 + right) : 0u),
        round_high(right < 2 ? 0u : uint32_t{1} << static_cast<uint32_t>(right - 2)),
        offset(out.offset),
        low(out.range[0]),
        high(out.range[1]) {}

  // (product + 2^(30 + right)) >> (31 + right), wrapped to int32, in 32-bit halves (a carry into
  // the top word), which GCC 12 keeps in registers on the Cortex-M55 (its 64-bit shifts of int64
  // go through the stack): the top word alone once the shift passes 32.
  int8_t apply(uint32_t acc) const {
    const auto shifted = static_cast<int32_t>(acc << static_cast<uint32_t>(left));
    const int64_t product = static_cast<int64_t>(shifted) * multiplier;
    const auto bottom = static_cast<uint32_t>(product), rounded = bottom + round_low;
    const auto top =
        static_cast<uint32_t>(static_cast<uint64_t>(product) >> 32) + round_high + (rounded < bottom ? 1u : 0u);
    const int32_t result = right == 0 ? static_cast<int32_t>((top << 1) | (rounded >> 31))
                                      : static_cast<int32_t>(top) >> (right - 1);  // arithmetic
    int32_t sum;
    if (__builtin_expect(__builtin_add_overflow(result, offset, &sum), 0)) sum = offset > 0 ? INT32_MAX : INT32_MIN;
    if (__builtin_expect(sum < low, 0)) sum = low;
    if (__builtin_expect(sum > high, 0)) sum = high;
    return static_cast<int8_t>(sum);
  }
};

// One call's view of the columns: the windows of n pixels, their weights and outputs.
struct Strip {
  const int8_t* columns;
  ptrdiff_t window, n;
  Steps steps;  // of the output's channels and pixels
};

#if defined(KILN_HELIUM)
// The sums of a group's 4 pixels (columns from `group`) over `pieces` (>= 1) whole 16-byte pieces
// against weight rows w0 and w1: *a lane p, *b lane p (each lane moved by its own VMOV). In assembly: GCC 12 spills the
// eight sums, and VMLADAV takes only even registers, which the sums occupy here (r0 .. r12, lr), the pointers the odd
// ones.
[[gnu::always_inline]] inline void helium_pieces(const int8_t* group, const int8_t* w0_row, const int8_t* w1_row,
                                                 ptrdiff_t pieces, int32x4_t* a, int32x4_t* b) {
  register int32_t a0 asm("r0"), a1 asm("r2"), a2 asm("r4"), a3 asm("r6");
  register int32_t b0 asm("r8"), b1 asm("r10"), b2 asm("r12"), b3 asm("lr");
  register const int8_t* x asm("r1") = group;
  register const int8_t* w0 asm("r3") = w0_row;
  register const int8_t* w1 asm("r5") = w1_row;
  register ptrdiff_t count asm("r9") = pieces;
  int32x4_t va, vb;
  // One piece: the 4 pixels' vectors, then each row's, OP (VMLADAV or VMLADAVA) into the sums.
#define KILN_PIECE(OP)                                                                                       \
  "vldrb.8 q0, [%[x]], #16\n vldrb.8 q1, [%[x]], #16\n vldrb.8 q2, [%[x]], #16\n vldrb.8 q3, [%[x]], #16\n"  \
  "vldrb.8 q4, [%[w0]], #16\n" OP ".s8 %[a0], q0, q4\n" OP ".s8 %[a1], q1, q4\n" OP ".s8 %[a2], q2, q4\n" OP \
  ".s8 %[a3], q3, q4\n vldrb.8 q4, [%[w1]], #16\n" OP ".s8 %[b0], q0, q4\n" OP ".s8 %[b1], q1, q4\n" OP      \
  ".s8 %[b2], q2, q4\n" OP ".s8 %[b3], q3, q4\n"
  asm volatile(
      KILN_PIECE("vmladav")
      "subs %[count], #1\n"
      "beq 2f\n"
      "tst %[count], #1\n"  // an odd count left: one piece, then pairs
      "beq 1f\n"
      KILN_PIECE("vmladava")
      "subs %[count], #1\n"
      "beq 2f\n"
      "1:\n"
      KILN_PIECE("vmladava")
      KILN_PIECE("vmladava")
      "subs %[count], #2\n"
      "bne 1b\n"
      "2:\n"
      "vmov.32 %q[va][0], %[a0]\n"
      "vmov.32 %q[va][1], %[a1]\n"
      "vmov.32 %q[va][2], %[a2]\n"
      "vmov.32 %q[va][3], %[a3]\n"
      "vmov.32 %q[vb][0], %[b0]\n"
      "vmov.32 %q[vb][1], %[b1]\n"
      "vmov.32 %q[vb][2], %[b2]\n"
      "vmov.32 %q[vb][3], %[b3]\n"
      : [x] "+r"(x), [w0] "+r"(w0), [w1] "+r"(w1), [count] "+r"(count), [a0] "=r"(a0), [a1] "=r"(a1), [a2] "=r"(a2),
        [a3] "=r"(a3), [b0] "=r"(b0), [b1] "=r"(b1), [b2] "=r"(b2), [b3] "=r"(b3), [va] "=w"(va), [vb] "=w"(vb)
      :
      : "q0", "q1", "q2", "q3", "q4", "memory", "cc");
#undef KILN_PIECE
  *a = va, *b = vb;
}

// Lanes (v0, v1, v2, v3).
inline int32x4_t lanes_of(int32_t v0, int32_t v1, int32_t v2, int32_t v3) {
  return vsetq_lane_s32(v3, vsetq_lane_s32(v2, vsetq_lane_s32(v1, vdupq_n_s32(v0), 1), 2), 3);
}

// How column_strip requantizes: lane by lane (a multiplier is INT32_MIN, where VQRDMULH
// saturates), ChannelRequantization's vectors, or its arithmetic for shifts that are all right
// shifts.
constexpr int kLanes = 0, kVectors = 1, kSimple = 2;

// Output channels o and o + R - 1 (R 1 or 2) of the strip's pixels: per group of 4 pixels the
// MAC loop over its whole pieces (kTail: then the last piece, its weights predicated), then 4
// lanes a channel requantized (kMode) and stored.
template <int R, int kMode, bool kTail>
[[gnu::noinline]] void column_strip(const Strip& st, const int8_t* w, const int32_t* constant, const OutputStage& out,
                                    int64_t o, int8_t* y) {
  const ptrdiff_t n = st.window, whole = n / 16, gb = group_bytes(n);
  const int8_t* w1 = w + (R - 1) * n;
  const int32_t k0 = constant[0], k1 = constant[R - 1], offset = out.offset;
  const ChannelRequantization first(*out.q, o, out), second(*out.q, o + R - 1, out);
  const int32x4_t low = vdupq_n_s32(out.range[0]), high = vdupq_n_s32(out.range[1]);
  // kSimple: no left shift, a right shift (fixed::requantize's one rounding: VQDMULH floors, VRSHL
  // rounds), the clamp's vectors shared.
  const auto apply = [&](const ChannelRequantization& q, int32x4_t v) {
    if constexpr (kMode != kSimple) return q.apply(v, offset);
    v = vrshlq_n_s32(vqdmulhq_n_s32(v, q.multiplier), q.right);
    return vminq_s32(vmaxq_s32(vqaddq_n_s32(v, offset), low), high);
  };
  const ptrdiff_t pixel = st.steps.pixel, channel = st.steps.channel;
  const uint32x4_t apart = vmulq_n_u32(vidupq_n_u32(0, 1), static_cast<uint32_t>(pixel));
  const mve_pred16_t tail_lanes = vctp8q(static_cast<uint32_t>(n % 16));
  const int8_t* group = st.columns;
  int8_t* at = y;
  // One group: `count` pixels (kFull: 4) from `group`, their outputs from `at`.
  const auto one = [&](auto full, ptrdiff_t count) {
    int32x4_t a, b;
    if (!kTail || whole > 0) {
      helium_pieces(group, w, w1, whole, &a, &b);
    } else {
      a = b = vdupq_n_s32(0);
    }
    if constexpr (kTail) {
      const int8_t* last = group + whole * 64;
      const int8x16_t x0 = vld1q_s8(last), x1 = vld1q_s8(last + 16), x2 = vld1q_s8(last + 32);
      const int8x16_t x3 = vld1q_s8(last + 48);
      const int8x16_t c = vldrbq_z_s8(w + whole * 16, tail_lanes), d = vldrbq_z_s8(w1 + whole * 16, tail_lanes);
      a = vaddq_s32(a, lanes_of(vmladavq_s8(x0, c), vmladavq_s8(x1, c), vmladavq_s8(x2, c), vmladavq_s8(x3, c)));
      b = vaddq_s32(b, lanes_of(vmladavq_s8(x0, d), vmladavq_s8(x1, d), vmladavq_s8(x2, d), vmladavq_s8(x3, d)));
    }
    a = vaddq_n_s32(a, k0), b = vaddq_n_s32(b, k1);
    if constexpr (kMode != kLanes) {
      if constexpr (decltype(full)::value) {
        vstrbq_scatter_offset_s32(at, apart, apply(first, a));
        if constexpr (R > 1) vstrbq_scatter_offset_s32(at + channel, apart, apply(second, b));
      } else {
        const mve_pred16_t valid = vctp32q(static_cast<uint32_t>(count));
        vstrbq_scatter_offset_p_s32(at, apart, apply(first, a), valid);
        if constexpr (R > 1) vstrbq_scatter_offset_p_s32(at + channel, apart, apply(second, b), valid);
      }
    } else {
      int32_t lanes[8];
      vst1q_s32(lanes, a), vst1q_s32(lanes + 4, b);
      for (ptrdiff_t p = 0; p < count; ++p) {
        at[p * pixel] = out.scalar(lanes[p], o);
        if constexpr (R > 1) at[p * pixel + channel] = out.scalar(lanes[4 + p], o + 1);
      }
    }
  };
  ptrdiff_t left = st.n;
  for (; left >= 4; left -= 4, group += gb, at += 4 * pixel) one(std::true_type{}, 4);
  if (left > 0) one(std::false_type{}, left);
}
#elif defined(KILN_DSP)
// A channel pair's weights widened for SMLAD: per 4 window bytes k..k+3, the int16 pairs
// (w0[k], w0[k+2]), (w0[k+1], w0[k+3]), then w1's; bytes past n read as zero. wide: 4 words a step.
void widen_pair(const int8_t* w0, const int8_t* w1, ptrdiff_t n, uint32_t* wide) {
  ptrdiff_t k = 0;
  for (; k + 4 <= n; k += 4, wide += 4) {
    const uint32_t a = word_at(w0 + k), b = word_at(w1 + k);
    wide[0] = static_cast<uint32_t>(even_bytes(a)), wide[1] = static_cast<uint32_t>(odd_bytes(a));
    wide[2] = static_cast<uint32_t>(even_bytes(b)), wide[3] = static_cast<uint32_t>(odd_bytes(b));
  }
  if (k < n) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, w0 + k, static_cast<size_t>(n - k)), std::memcpy(&b, w1 + k, static_cast<size_t>(n - k));
    wide[0] = static_cast<uint32_t>(even_bytes(a)), wide[1] = static_cast<uint32_t>(odd_bytes(a));
    wide[2] = static_cast<uint32_t>(even_bytes(b)), wide[3] = static_cast<uint32_t>(odd_bytes(b));
  }
}

// The sums of a group's 2 pixels (columns from `group`) over `steps` (>= 1) steps of 4 window
// bytes against a widened channel pair: s[0] pixel 0 channel 0, s[1] pixel 1 channel 0, s[2],
// s[3] the same of channel 1. In assembly: thirteen registers live in the loop (four sums, six
// words, two pointers, the count), which GCC 12 spills from C.
[[gnu::always_inline]] inline void dsp_steps(const int8_t* group, const uint32_t* wide, ptrdiff_t steps,
                                             uint32_t s[4]) {
  register uint32_t a asm("r0"), b asm("r1"), c asm("r2"), d asm("r3"), e asm("r4"), f asm("r5");
  register uint32_t s00 asm("r6"), s10 asm("r8"), s01 asm("r9"), s11 asm("r10");
  register const int8_t* x asm("r11") = group;
  register const uint32_t* w asm("r12") = wide;
  register ptrdiff_t count asm("lr") = steps;
  asm volatile(
      "ldm %[x]!, {%[a], %[b], %[c], %[d]}\n"
      "ldm %[w]!, {%[e], %[f]}\n"
      "smuad %[s00], %[a], %[e]\n"
      "smlad %[s00], %[b], %[f], %[s00]\n"
      "smuad %[s10], %[c], %[e]\n"
      "smlad %[s10], %[d], %[f], %[s10]\n"
      "ldm %[w]!, {%[e], %[f]}\n"
      "smuad %[s01], %[a], %[e]\n"
      "smlad %[s01], %[b], %[f], %[s01]\n"
      "smuad %[s11], %[c], %[e]\n"
      "smlad %[s11], %[d], %[f], %[s11]\n"
      "subs %[count], #1\n"
      "beq 2f\n"
      "1:\n"
      "ldm %[x]!, {%[a], %[b], %[c], %[d]}\n"
      "ldm %[w]!, {%[e], %[f]}\n"
      "smlad %[s00], %[a], %[e], %[s00]\n"
      "smlad %[s00], %[b], %[f], %[s00]\n"
      "smlad %[s10], %[c], %[e], %[s10]\n"
      "smlad %[s10], %[d], %[f], %[s10]\n"
      "ldm %[w]!, {%[e], %[f]}\n"
      "smlad %[s01], %[a], %[e], %[s01]\n"
      "smlad %[s01], %[b], %[f], %[s01]\n"
      "smlad %[s11], %[c], %[e], %[s11]\n"
      "smlad %[s11], %[d], %[f], %[s11]\n"
      "subs %[count], #1\n"
      "bne 1b\n"
      "2:\n"
      : [x] "+r"(x), [w] "+r"(w), [count] "+r"(count), [a] "=r"(a), [b] "=r"(b), [c] "=r"(c), [d] "=r"(d), [e] "=r"(e),
        [f] "=r"(f), [s00] "=r"(s00), [s10] "=r"(s10), [s01] "=r"(s01), [s11] "=r"(s11)
      :
      : "memory", "cc");
  s[0] = s00, s[1] = s10, s[2] = s01, s[3] = s11;
}

// Output channels o and o + R - 1 (R 1 or 2) of the strip's pixels, 2 pixels at a time; `wide`
// holds widen_pair's words of the pair.
template <int R>
[[gnu::noinline]] void column_strip(const Strip& st, const uint32_t* wide, const int32_t* constant,
                                    const OutputStage& out, int64_t o, int8_t* y) {
  const ptrdiff_t steps = (st.window + 3) / 4, gb = steps * 16;
  const ScalarRequantization first(out, o), second(out, o + R - 1);
  const auto k0 = static_cast<uint32_t>(constant[0]), k1 = static_cast<uint32_t>(constant[R - 1]);
  const ptrdiff_t pixel = st.steps.pixel, channel = st.steps.channel;
  ptrdiff_t px = 0;
  for (; px < st.n; px += 2) {
    uint32_t s[4];
    dsp_steps(st.columns + px / 2 * gb, wide, steps, s);
    int8_t* at = y + px * pixel;
    at[0] = first.apply(s[0] + k0);
    if constexpr (R > 1) at[channel] = second.apply(s[2] + k1);
    if (px + 1 < st.n) {
      at[pixel] = first.apply(s[1] + k0);
      if constexpr (R > 1) at[pixel + channel] = second.apply(s[3] + k1);
    }
  }
}
#else
// A channel pair's weights interleaved: pair[2 k] = w0[k], pair[2 k + 1] = w1[k].
void interleave_pair(const int8_t* w0, const int8_t* w1, ptrdiff_t n, int8_t* pair) {
  for (ptrdiff_t k = 0; k < n; ++k) pair[2 * k] = w0[k], pair[2 * k + 1] = w1[k];
}

#if defined(__GNUC__) && !defined(__clang__)
#define KILN_SCALAR_LOOP [[gnu::optimize("no-tree-vectorize")]]  // GCC 12 vectorizes it through the stack
#else
#define KILN_SCALAR_LOOP
#endif

// Output channels o and o + R - 1 (R 1 or 2) of the strip's pixels, 4 pixels at a time: each
// weight byte's load shared by 4 pixels, each pixel byte's by 2 channels; `pair` holds
// interleave_pair's bytes of the pair.
template <int R>
KILN_SCALAR_LOOP [[gnu::noinline]] void column_strip(const Strip& st, const int8_t* pair, const int32_t* constant,
                                                     const OutputStage& out, int64_t o, int8_t* y) {
  const ptrdiff_t n = st.window, gb = n * 4;
  const ScalarRequantization first(out, o), second(out, o + R - 1);
  const ptrdiff_t pixel = st.steps.pixel, channel = st.steps.channel;
  for (ptrdiff_t px = 0; px < st.n; px += 4) {
    const int8_t* x = st.columns + px / 4 * gb;
    const int8_t* w = pair;
    auto a0 = static_cast<uint32_t>(constant[0]), a1 = a0, a2 = a0, a3 = a0;
    auto b0 = static_cast<uint32_t>(constant[R - 1]), b1 = b0, b2 = b0, b3 = b0;
    for (ptrdiff_t k = 0; k < n; ++k, x += 4, w += 2) {
      const int32_t c = w[0], d = w[1];
      int32_t v = x[0];
      a0 += static_cast<uint32_t>(v * c), b0 += static_cast<uint32_t>(v * d);
      v = x[1];
      a1 += static_cast<uint32_t>(v * c), b1 += static_cast<uint32_t>(v * d);
      v = x[2];
      a2 += static_cast<uint32_t>(v * c), b2 += static_cast<uint32_t>(v * d);
      v = x[3];
      a3 += static_cast<uint32_t>(v * c), b3 += static_cast<uint32_t>(v * d);
    }
    int8_t* at = y + px * pixel;
    if (st.n - px >= 4) {  // a whole group: straight-line stores
      at[0] = first.apply(a0), at[pixel] = first.apply(a1);
      at[2 * pixel] = first.apply(a2), at[3 * pixel] = first.apply(a3);
      if constexpr (R > 1) {
        at += channel;
        at[0] = second.apply(b0), at[pixel] = second.apply(b1);
        at[2 * pixel] = second.apply(b2), at[3 * pixel] = second.apply(b3);
      }
      continue;
    }
    const uint32_t a[4] = {a0, a1, a2, a3}, b[4] = {b0, b1, b2, b3};
    const ptrdiff_t count = st.n - px;
    for (ptrdiff_t p = 0; p < count; ++p) {
      at[p * pixel] = first.apply(a[p]);
      if constexpr (R > 1) at[p * pixel + channel] = second.apply(b[p]);
    }
  }
}
#endif

#if defined(KILN_HELIUM)
using HeliumStrip = void (*)(const Strip&, const int8_t*, const int32_t*, const OutputStage&, int64_t, int8_t*);
constexpr HeliumStrip helium_strips[12] = {  // [pair][mode][tail]
    column_strip<1, kLanes, false>,  column_strip<1, kLanes, true>,   column_strip<1, kVectors, false>,
    column_strip<1, kVectors, true>, column_strip<1, kSimple, false>, column_strip<1, kSimple, true>,
    column_strip<2, kLanes, false>,  column_strip<2, kLanes, true>,   column_strip<2, kVectors, false>,
    column_strip<2, kVectors, true>, column_strip<2, kSimple, false>, column_strip<2, kSimple, true>};

// column_strip's mode for channels [o, o + count).
int helium_mode(const Requantization& q, int64_t o, int count) {
  if (!q.no_min_multiplier) return kLanes;
  for (int j = 0; j < count; ++j) {
    if (q.shift(o + j) >= 0) return kVectors;
  }
  return kSimple;
}
#endif

// Output channels [o0, o1) of the strip's pixels (their first output at y), pairs then one.
void strip_channels(const Strip& st, const int8_t* weight, const int32_t* constant, const OutputStage& out, int64_t o0,
                    int64_t o1, int8_t* y, void* wide_words) {
#if defined(KILN_DSP)
  auto* wide = static_cast<uint32_t*>(wide_words);
#elif defined(KILN_HELIUM)
  static_cast<void>(wide_words);
#endif
  for (int64_t o = o0; o < o1;) {
    const int8_t* w = weight + o * st.window;
    const int32_t* k = constant + (o - o0);
    int8_t* first = y + o * st.steps.channel;
    const bool pair = o + 2 <= o1;
#if defined(KILN_DSP)
    widen_pair(w, pair ? w + st.window : w, st.window, wide);
    pair ? column_strip<2>(st, wide, k, out, o, first) : column_strip<1>(st, wide, k, out, o, first);
#elif defined(KILN_HELIUM)
    const int mode = helium_mode(*out.q, o, pair ? 2 : 1);
    const auto strip = helium_strips[(pair ? 6 : 0) + 2 * mode + (st.window % 16 != 0 ? 1 : 0)];
    strip(st, w, k, out, o, first);
#else
    auto* interleaved = static_cast<int8_t*>(wide_words);
    interleave_pair(w, pair ? w + st.window : w, st.window, interleaved);
    pair ? column_strip<2>(st, interleaved, k, out, o, first) : column_strip<1>(st, interleaved, k, out, o, first);
#endif
    o += pair ? 2 : 1;
  }
}

// A convolution through the band: per band of input, runs of output pixels whose outputs lie
// evenly apart (a band's every pixel where the output's rows follow each other, else a row), per
// run as many pixels as the columns buffer holds at a time.
void convolve_band(const ConvShape& s, const BandPlan& plan, const int8_t* x, const int32_t* bias,
                   const OutputStage& out, int8_t* y, const int8_t* weight) {
  alignas(16) int8_t band[kBandBytes + kSlack];
  alignas(16) int8_t columns[kColumnsBytes];
  alignas(16) int8_t scratch[kMaxWindow + kSlack];
#if defined(KILN_DSP)
  uint32_t wide[kMaxWindow];  // a channel pair's widened weights: 4 words per 4 window bytes
#elif defined(KILN_HELIUM)
  uint32_t* wide = nullptr;
#else
  int8_t wide[2 * kMaxWindow];  // a channel pair's weights interleaved
#endif
  std::memset(band + kBandBytes, 0, kSlack);  // what a window's last piece reads past the band
  std::memset(columns, 0, sizeof columns);  // what a group's last pixels hold beyond the run
  std::memset(scratch, 0, sizeof scratch);
  int32_t constant[kChunk];  // per output channel: bias + input offset x the sum of its weights
  const auto cin = static_cast<ptrdiff_t>(s.cin_g), window = static_cast<ptrdiff_t>(s.kh * s.kw) * cin;
  const int64_t fit = kColumnsBytes / group_bytes(window) * kPixels;
  const Steps steps{static_cast<ptrdiff_t>(s.ys[1]), static_cast<ptrdiff_t>(s.ys[3])};
  const bool rows_follow = s.ys[2] == s.ow * s.ys[3];
  const auto pad = static_cast<int8_t>(-s.input_offset);
  const auto a = static_cast<uint32_t>(s.input_offset);
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
      for (int64_t ox0 = 0; ox0 < s.ow; ox0 += plan.strip) {
        const int64_t width = plan.strip < s.ow - ox0 ? plan.strip : s.ow - ox0;
        const ptrdiff_t cols = band_cols(s, width);
        for (int64_t oy0 = 0; oy0 < s.oh; oy0 += plan.rows) {
          const int64_t rows = plan.rows < s.oh - oy0 ? plan.rows : s.oh - oy0;
          if (!plan.pointwise) {
            fill_band(s, planes, static_cast<ptrdiff_t>(oy0 * s.stride[0] - s.padding[0]), band_rows(s, rows),
                      static_cast<ptrdiff_t>(ox0 * s.stride[1] - s.padding[1]), cols, pad, band);
          }
          const bool joined = width == s.ow && rows_follow;  // the band's pixels one run
          const int64_t run = joined ? rows * width : width;
          for (int64_t r = 0; r < rows; r += joined ? rows : 1) {
            int8_t* first = y + b * s.ys[0] + (oy0 + r) * s.ys[2] + ox0 * s.ys[3];
            for (int64_t i0 = 0; i0 < run; i0 += fit) {
              const auto n = static_cast<ptrdiff_t>(fit < run - i0 ? fit : run - i0);
              if (plan.pointwise) {
                fill_pointwise(s, planes + ox0 * s.stride[1] * s.xs[3], oy0 + r + i0 / width, i0 % width, width, n,
                               columns, scratch);
              } else {
                fill_columns(s, band, cols * cin, r + i0 / width, i0 % width, width, n, columns, scratch);
              }
              const Strip st{columns, window, n, steps};
              strip_channels(st, weight, constant, out, o0, o1, first + i0 * steps.pixel, wide);
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
  BandPlan plan;
  if (plan_band(s, &plan)) {
    convolve_band(s, plan, s8(*x), bias, stage, s8(*out), weight);
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
