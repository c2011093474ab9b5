// Integer cortex_m kernels of weights, as kiln.program.kernels.integer computes them
// (ExecuTorch's schemas, CMSIS-NN's arithmetic; fixed_point.h). Each output's sum of
// products (plus its bias) wraps to int32 before the requantize, as CMSIS-NN's int32
// accumulator; every path sums mod 2^32 (dot.h: Helium, DSP or plain C), so all give the same
// bits.
// The convolutions copy the windows of a strip of output pixels into a columns buffer on the stack
// (kBandBytes; Columns), channels last, the padding filled with the input's zero point
// (-input_offset), so that sum (x + a) w over a window is sum x w over its bytes plus a times the
// sum of the channel's weights (a constant per output channel): a window's bytes lie contiguous,
// as the OHWI weights do. A depthwise convolution copies its channel's padded rows instead. Where
// the zero point is no int8 or a window does not fit, the direct path (pixel_sum) computes the
// same sums tap by tap. Every path reads the input and writes the output through their steps in
// memory (ConvShape::xs, ys), so either DimOrder takes the same paths.
// (Over 800 lines: each kernel's Helium, DSP and plain C paths stay beside each other, one file
// per kernel family as kernels/*.cpp.)
//   cortex_m::quantized_linear.out (input, weights, bias?, kernel_sum?, input_offset,
//     filter_offset, output_offset, requantize_multipliers, requantize_shifts,
//     activation_max, activation_min, out): weights [out, in]; sum (x + input_offset)
//     (w + filter_offset) + bias, or with kernel_sum (bias folded in, ExecuTorch's MVE form)
//     sum x w + filter_offset sum x + kernel_sum; one multiplier and shift (IntLists), or one
//     per output feature.
//   cortex_m::quantized_conv2d.out (input, weight, bias?, stride, padding, dilation,
//     input_offset, output_offset, requantize_multipliers, requantize_shifts, activation_min,
//     activation_max, scratch, out): input NCHW, weight OHWI, groups C_in / I; zero padding
//     (contributes 0); multipliers and shifts Int tensors, one per output channel. Input and
//     out tensor each in either DimOrder (ExecuTorch's Cortex-M flow writes channels-last).
//   cortex_m::quantized_depthwise_conv2d.out (input, weight, bias?, stride, padding,
//     dilation, depth_multiplier, input_offset, output_offset, ..as conv2d): weight IHWO
//     [1, kh, kw, C_in * depth_multiplier]; output channel o reads input channel
//     o / depth_multiplier.
// The scratch argument is ExecuTorch's and not read.
#include <cstddef>
#include <cstring>

#include "dot.h"
#include "kiln/runtime/try.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxParam = 1 << 16;  // strides, padding, dilation, offsets

// Per-channel requantization: multipliers and shifts with 1 or `channels` items.
struct Requantization {
  const int32_t* tensor_multipliers = nullptr;  // Int tensors (conv), else the lists below
  const int32_t* tensor_shifts = nullptr;
  int64_t list_multipliers[1] = {0}, list_shifts[1] = {0};
  const KernelArgs* args = nullptr;
  size_t list_at = 0;  // position of the multiplier IntList (its shifts follow)
  bool per_channel = false;
  bool no_min_multiplier = true;  // no multiplier is INT32_MIN (where VQRDMULH saturates)

  int32_t multiplier(int64_t channel) const {
    if (tensor_multipliers != nullptr) return tensor_multipliers[channel];
    return static_cast<int32_t>(per_channel ? args->int_item((*args)[list_at], static_cast<size_t>(channel))
                                            : list_multipliers[0]);
  }
  int32_t shift(int64_t channel) const {
    if (tensor_shifts != nullptr) return tensor_shifts[channel];
    return static_cast<int32_t>(per_channel ? args->int_item((*args)[list_at + 1], static_cast<size_t>(channel))
                                            : list_shifts[0]);
  }
  int32_t apply(int32_t acc, int64_t channel) const {
    return fixed::requantize(acc, multiplier(channel), shift(channel));
  }
};

// The int8 output of a sum: requantized for its channel, plus the output offset, clamped.
struct OutputStage {
  const Requantization* q;
  int32_t offset;
  int32_t range[2];

  int8_t scalar(int32_t acc, int64_t channel) const { return offset_clamp(q->apply(acc, channel), offset, range); }
};

#if defined(KILN_HELIUM)
// fixed::requantize of four lanes, each with its channel's multiplier and shift: VQRDMULH is the
// high multiply wherever the multiplier is not INT32_MIN (Requantization::no_min_multiplier), and
// DIV_POW2 is a rounding shift of the value less 1 where it is negative (CMSIS-NN's MVE form).
struct LaneRequantization {
  int32x4_t multiplier, left, right, negative_fix;  // right <= 0: a right shift by -right

  LaneRequantization() = default;
  LaneRequantization(int32x4_t multipliers, int32x4_t shifts)
      : multiplier(multipliers),
        left(vmaxq_s32(shifts, vdupq_n_s32(0))),
        right(vminq_s32(shifts, vdupq_n_s32(0))),
        negative_fix(vpselq_s32(vdupq_n_s32(-1), vdupq_n_s32(0), vcmpltq_n_s32(shifts, 0))) {}

  // The output stage's int32 values of four sums (before the narrowing store).
  int32x4_t apply(int32x4_t acc, const OutputStage& out) const {
    int32x4_t v = vqrdmulhq_s32(vshlq_s32(acc, left), multiplier);
    v = vrshlq_s32(vqaddq_s32(v, vandq_s32(vshrq_n_s32(v, 31), negative_fix)), right);
    v = vqaddq_n_s32(v, out.offset);  // saturating: the clamp gives the same
    return vminq_s32(vmaxq_s32(v, vdupq_n_s32(out.range[0])), vdupq_n_s32(out.range[1]));
  }
};

LaneRequantization lanes_of(const Requantization& q, int64_t first) {
  const int32_t m[4] = {q.multiplier(first), q.multiplier(first + 1), q.multiplier(first + 2), q.multiplier(first + 3)};
  const int32_t s[4] = {q.shift(first), q.shift(first + 1), q.shift(first + 2), q.shift(first + 3)};
  return LaneRequantization(vld1q_s32(m), vld1q_s32(s));
}

// LaneRequantization's arithmetic for four values of one channel, its parameters scalars.
struct ChannelRequantization {
  int32_t multiplier = 0, left = 0, right = 0;  // right <= 0: a right shift by -right
  int32x4_t negative_fix, low, high;

  ChannelRequantization() = default;
  ChannelRequantization(const Requantization& q, int64_t channel, const OutputStage& out)
      : multiplier(q.multiplier(channel)),
        left(q.shift(channel) > 0 ? q.shift(channel) : 0),
        right(q.shift(channel) < 0 ? q.shift(channel) : 0),
        negative_fix(vdupq_n_s32(right < 0 ? -1 : 0)),
        low(vdupq_n_s32(out.range[0])),
        high(vdupq_n_s32(out.range[1])) {}

  int32x4_t apply(int32x4_t acc, int32_t offset) const {
    int32x4_t v = vqrdmulhq_n_s32(vshlq_r_s32(acc, left), multiplier);
    v = vrshlq_n_s32(vqaddq_s32(v, vandq_s32(vshrq_n_s32(v, 31), negative_fix)), right);
    return vminq_s32(vmaxq_s32(vqaddq_n_s32(v, offset), low), high);
  }
};
#endif

// Every multiplier in int32 and every shift within 31; *no_min: no multiplier is INT32_MIN.
Status check_items(const KernelArgs& args, size_t at, bool* no_min) {
  const Value& m = args[at];
  const Value& s = args[at + 1];
  for (size_t j = 0; j < m.list.count; ++j) {
    const int64_t v = args.int_item(m, j);
    if (v < INT32_MIN || v > INT32_MAX) return unsupported(at, static_cast<uint32_t>(j));
    *no_min &= v != INT32_MIN;
  }
  for (size_t j = 0; j < s.list.count; ++j) {
    const int64_t v = args.int_item(s, j);
    if (v < -31 || v > 31) return unsupported(at + 1, static_cast<uint32_t>(j));
  }
  return {};
}

// IntList multipliers and shifts (positions at, at + 1): 1 or `channels` items each.
Result<Requantization> list_requantization(const KernelArgs& args, size_t at, int64_t channels) {
  const Value& m = args[at];
  const Value& s = args[at + 1];
  if (m.kind != ValueKind::kIntList) return bad_argument(at, static_cast<uint32_t>(m.kind));
  if (s.kind != ValueKind::kIntList) return bad_argument(at + 1, static_cast<uint32_t>(s.kind));
  if (m.list.count != s.list.count || (m.list.count != 1 && m.list.count != channels)) return shape_mismatch(at);
  Requantization r;
  KILN_CHECK(check_items(args, at, &r.no_min_multiplier));
  r.args = &args, r.list_at = at, r.per_channel = m.list.count != 1;
  r.list_multipliers[0] = args.int_item(m, 0), r.list_shifts[0] = args.int_item(s, 0);
  return r;
}

// Int tensors of `channels` multipliers and shifts (positions at, at + 1).
Result<Requantization> tensor_requantization(const KernelArgs& args, size_t at, int64_t channels) {
  KILN_TRY(const Tensor* m, input_tensor(args, at, ScalarType::kInt));
  KILN_TRY(const Tensor* s, input_tensor(args, at + 1, ScalarType::kInt));
  if (m->dim != 1 || m->sizes[0] != channels) return shape_mismatch(at);
  if (s->dim != 1 || s->sizes[0] != channels) return shape_mismatch(at + 1);
  const auto* shifts = static_cast<const int32_t*>(s->data);
  for (int64_t c = 0; c < channels; ++c) {
    if (shifts[c] < -31 || shifts[c] > 31) return unsupported(at + 1, static_cast<uint32_t>(c));
  }
  Requantization r;
  r.tensor_multipliers = static_cast<const int32_t*>(m->data), r.tensor_shifts = shifts;
  for (int64_t c = 0; c < channels; ++c) r.no_min_multiplier &= r.tensor_multipliers[c] != INT32_MIN;
  return r;
}

// An optional Int tensor of `channels` values (bias, kernel_sum): nullptr for None.
Result<const int32_t*> optional_channels(const KernelArgs& args, size_t i, int64_t channels) {
  if (is_null(args, i)) return static_cast<const int32_t*>(nullptr);
  KILN_TRY(const Tensor* t, input_tensor(args, i, ScalarType::kInt));
  if (t->numel != channels) return shape_mismatch(i, t->numel);
  return static_cast<const int32_t*>(t->data);
}

// Element steps of an output's channels and pixels along a row, in memory.
struct Steps {
  ptrdiff_t channel, pixel;
};

#if defined(KILN_HELIUM)
// Four int32 lanes narrowed to the bytes at y + lane step (the lanes p enables).
inline void store_lanes(int8_t* y, ptrdiff_t step, int32x4_t v, mve_pred16_t p) {
  if (step == 1) {
    vstrbq_p_s32(y, v, p);
  } else {
    vstrbq_scatter_offset_p_s32(y, vmulq_n_u32(vidupq_n_u32(0, 1), static_cast<uint32_t>(step)), v, p);
  }
}
#endif

struct ConvShape {
  int64_t n, c, h, w, cout, kh, kw, cin_g, cout_g, oh, ow;
  int64_t xs[4], ys[4];  // element steps of N, C, H, W in the input's and the output's memory
  int64_t stride[2], padding[2], dilation[2];
  int64_t input_offset, output_offset;
  int32_t range[2];
};

// The arguments both convolutions share; `shift` is 1 for depthwise (its depth_multiplier
// comes before the offsets).
Status conv_shape(const KernelArgs& args, const Tensor& x, size_t shift, ConvShape* s) {
  if (x.dim != 4) return unsupported(0, x.dim);
  KILN_CHECK(pair_arg(args, 3, 1, kMaxParam, s->stride));
  KILN_CHECK(pair_arg(args, 4, 0, kMaxParam, s->padding));
  KILN_CHECK(pair_arg(args, 5, 1, kMaxParam, s->dilation));
  KILN_TRY(s->input_offset, ranged_int(args, 6 + shift, -kMaxParam, kMaxParam));
  KILN_TRY(s->output_offset, ranged_int(args, 7 + shift, INT32_MIN, INT32_MAX));
  KILN_CHECK(activation_range(args, 10 + shift, 11 + shift, s->range));
  if (args[12 + shift].kind != ValueKind::kTensor) return bad_argument(12 + shift);
  s->n = x.sizes[0], s->c = x.sizes[1], s->h = x.sizes[2], s->w = x.sizes[3];
  nchw_steps(x, s->xs);
  const int64_t span_h = s->h + 2 * s->padding[0] - s->dilation[0] * (s->kh - 1) - 1;
  const int64_t span_w = s->w + 2 * s->padding[1] - s->dilation[1] * (s->kw - 1) - 1;
  if (span_h < 0 || span_w < 0) return shape_mismatch(1);
  s->oh = span_h / s->stride[0] + 1, s->ow = span_w / s->stride[1] + 1;
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
constexpr int64_t kMaxTaps = 64;        // depthwise kernel taps held in registers' reach

// Input columns that n output pixels of a row read, and input rows that n output rows read.
ptrdiff_t band_cols(const ConvShape& s, int64_t n) {
  return static_cast<ptrdiff_t>((n - 1) * s.stride[1] + (s.kw - 1) * s.dilation[1] + 1);
}
ptrdiff_t band_rows(const ConvShape& s, int64_t n) {
  return static_cast<ptrdiff_t>((n - 1) * s.stride[0] + (s.kh - 1) * s.dilation[0] + 1);
}

// dst[i] = src[i stride] for i < n: one tap's input channels, or a row's columns.
void copy_channels(const int8_t* src, ptrdiff_t stride, ptrdiff_t n, int8_t* dst) {
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
void fill_rows(const ConvShape& s, const int8_t* plane, ptrdiff_t first_row, ptrdiff_t rows, ptrdiff_t first_col,
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

// Whether the band paths take s: the padding's value (the input's zero point) is an int8, and the
// columns buffer holds the windows of one group of pixels.
bool band_fits(const ConvShape& s) {
  const int64_t pad = -s.input_offset;
  const auto window = static_cast<ptrdiff_t>(s.kh * s.kw * s.cin_g);
  const ptrdiff_t piece = piece_bytes(window);
  return pad >= INT8_MIN && pad <= INT8_MAX && window <= kBandBytes &&
         (window + piece - 1) / piece * piece * kPixels <= kBandBytes;
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

// Whether the depthwise band path takes s: one input channel a group, at most kMaxTaps taps, and
// one output row's windows fit the band.
bool depthwise_fits(const ConvShape& s) {
  return s.cin_g == 1 && s.c == s.cout / s.cout_g && s.kh * s.kw <= kMaxTaps && band_fits(s) &&
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

// The rest both convolutions share: the bias (argument 2), the requantization (argument
// `requantize_at`), the int8 output (argument `out_at`) of s's shape in either DimOrder (its steps
// into s.ys), then the band path that
// takes s, else the direct path. weight: OHWI (conv2d) or IHWO (`depthwise`).
Status convolve_into(KernelArgs& args, const Tensor& x, ConvShape s, size_t requantize_at, size_t out_at,
                     const int8_t* weight, bool depthwise) {
  KILN_TRY(const int32_t* bias, optional_channels(args, 2, s.cout));
  KILN_TRY(Requantization q, tensor_requantization(args, requantize_at, s.cout));
  const int64_t sizes[4] = {s.n, s.cout, s.oh, s.ow};
  KILN_TRY(Tensor * out, int8_output(args, out_at, sizes, 4, true));
  nchw_steps(*out, s.ys);
  const OutputStage stage{&q, static_cast<int32_t>(s.output_offset), {s.range[0], s.range[1]}};
  const auto kh = static_cast<ptrdiff_t>(s.kh), kw = static_cast<ptrdiff_t>(s.kw);
  const auto cin = static_cast<ptrdiff_t>(s.cin_g), cout = static_cast<ptrdiff_t>(s.cout);
  if (depthwise) {
    if (depthwise_fits(s)) {
      depthwise_band(s, s8(x), bias, stage, s8(*out), weight);
    } else {
      convolve_direct(s, s8(x), bias, stage, s8(*out), [=](ptrdiff_t o, ptrdiff_t, ptrdiff_t ky, ptrdiff_t kx) {
        return static_cast<int32_t>(weight[(ky * kw + kx) * cout + o]);
      });
    }
  } else if (band_fits(s)) {
    convolve_band(s, s8(x), bias, stage, s8(*out), weight);
  } else {
    convolve_direct(s, s8(x), bias, stage, s8(*out), [=](ptrdiff_t o, ptrdiff_t ci, ptrdiff_t ky, ptrdiff_t kx) {
      return static_cast<int32_t>(weight[((o * kh + ky) * kw + kx) * cin + ci]);
    });
  }
  return {};
}

// One row of the linear kernel: out_features outputs of x against weight rows of `in`, 4 rows a
// pass (then 1). constant(o): what each sum adds (bias and offsets, mod 2^32).
template <typename Constant>
void linear_row(const int8_t* x, const int8_t* w, int64_t in, int64_t out_features, const OutputStage& out,
                Constant constant, int8_t* y) {
  const auto n = static_cast<ptrdiff_t>(in);
  int64_t o = 0;
  for (; o + 4 <= out_features; o += 4) {
    int32_t acc[4];
    dot_rows<4>(x, w + o * n, n, n, acc);
    const int32_t k[4] = {constant(o), constant(o + 1), constant(o + 2), constant(o + 3)};
#if defined(KILN_HELIUM)
    if (out.q->no_min_multiplier) {
      vstrbq_s32(y + o, lanes_of(*out.q, o).apply(vaddq_s32(vld1q_s32(acc), vld1q_s32(k)), out));
      continue;
    }
#endif
    for (int j = 0; j < 4; ++j) {
      y[o + j] = out.scalar(static_cast<int32_t>(static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(k[j])), o + j);
    }
  }
  for (; o < out_features; ++o) {
    int32_t acc[1];
    dot_rows<1>(x, w + o * n, n, n, acc);
    y[o] = out.scalar(static_cast<int32_t>(static_cast<uint32_t>(acc[0]) + static_cast<uint32_t>(constant(o))), o);
  }
}

}  // namespace

Status cortex_m_quantized_linear_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 11));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* w, input_tensor(args, 1, ScalarType::kChar));
  if (w->dim != 2) return shape_mismatch(1, w->dim);
  if (x->dim < 1 || x->sizes[x->dim - 1] != w->sizes[1]) return shape_mismatch(0);
  const int64_t in = w->sizes[1], out_features = w->sizes[0];
  KILN_TRY(const int32_t* bias, optional_channels(args, 2, out_features));
  KILN_TRY(const int32_t* kernel_sum, optional_channels(args, 3, out_features));
  KILN_TRY(int64_t input_offset, ranged_int(args, 4, -kMaxParam, kMaxParam));
  KILN_TRY(int64_t filter_offset, ranged_int(args, 5, -kMaxParam, kMaxParam));
  KILN_TRY(int64_t output_offset, ranged_int(args, 6, INT32_MIN, INT32_MAX));
  KILN_TRY(Requantization q, list_requantization(args, 7, out_features));
  int32_t range[2];
  KILN_CHECK(activation_range(args, 10, 9, range));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d + 1 < x->dim; ++d) sizes[d] = x->sizes[d];
  sizes[x->dim - 1] = out_features;
  KILN_TRY(Tensor * out, int8_output(args, 11, sizes, x->dim));
  KILN_TRY(int64_t rows, size_product(*x, 0, x->dim - 1, 0));
  const int8_t *xs = s8(*x), *ws = s8(*w);
  int8_t* y = s8(*out);
  const OutputStage stage{&q, static_cast<int32_t>(output_offset), {range[0], range[1]}};
  // sum (x + a)(w + b) + bias = sum x w + b sum x + a sum w + n a b + bias, all mod 2^32; with
  // kernel_sum, sum x w + b sum x + kernel_sum.
  const auto a = static_cast<uint32_t>(input_offset), b = static_cast<uint32_t>(filter_offset);
  const auto n = static_cast<ptrdiff_t>(in);
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = xs + r * in;
    const uint32_t row_term = b != 0 ? b * static_cast<uint32_t>(byte_sum(row, n)) : 0u;
    if (kernel_sum != nullptr) {
      linear_row(
          row, ws, in, out_features, stage,
          [&](int64_t o) { return static_cast<int32_t>(row_term + static_cast<uint32_t>(kernel_sum[o])); },
          y + r * out_features);
    } else {
      const uint32_t fixed_term = row_term + static_cast<uint32_t>(in) * a * b;
      linear_row(
          row, ws, in, out_features, stage,
          [&](int64_t o) {
            const uint32_t start = bias != nullptr ? static_cast<uint32_t>(bias[o]) : 0u;
            return static_cast<int32_t>(fixed_term + start + a * static_cast<uint32_t>(byte_sum(ws + o * in, n)));
          },
          y + r * out_features);
    }
  }
  return {};
}

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
  return convolve_into(args, *x, s, 8, 13, s8(*w), false);
}

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
  return convolve_into(args, *x, s, 9, 14, s8(*w), true);
}

}  // namespace kiln::runtime::kernels
