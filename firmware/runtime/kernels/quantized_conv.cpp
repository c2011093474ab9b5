// Integer cortex_m kernels of weights, as kiln.program.kernels.integer computes them
// (ExecuTorch's schemas, CMSIS-NN's arithmetic; fixed_point.h). Each output's sum of
// products (plus its bias) wraps to int32 before the requantize, as CMSIS-NN's int32
// accumulator: the plain C convolution sums exactly in int64 (the offsets are within 2^16, so
// no int64 sum overflows) and wraps; its Helium path (convolve) and the linear kernel
// (dot_sums, dot.h: Helium, DSP or plain C) sum mod 2^32, the same bits.
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

  int32_t apply(int32_t acc, int64_t channel) const {
    if (tensor_multipliers != nullptr)
      return fixed::requantize(acc, tensor_multipliers[channel], tensor_shifts[channel]);
    const size_t j = per_channel ? static_cast<size_t>(channel) : 0;
    const int64_t m = per_channel ? args->int_item((*args)[list_at], j) : list_multipliers[0];
    const int64_t s = per_channel ? args->int_item((*args)[list_at + 1], j) : list_shifts[0];
    return fixed::requantize(acc, static_cast<int32_t>(m), static_cast<int32_t>(s));
  }
};

// Every multiplier in int32 and every shift within 31.
Status check_items(const KernelArgs& args, size_t at) {
  const Value& m = args[at];
  const Value& s = args[at + 1];
  for (size_t j = 0; j < m.list.count; ++j) {
    const int64_t v = args.int_item(m, j);
    if (v < INT32_MIN || v > INT32_MAX) return unsupported(at, static_cast<uint32_t>(j));
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
  KILN_CHECK(check_items(args, at));
  Requantization r;
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
  return r;
}

// An optional Int tensor of `channels` values (bias, kernel_sum): nullptr for None.
Result<const int32_t*> optional_channels(const KernelArgs& args, size_t i, int64_t channels) {
  if (is_null(args, i)) return static_cast<const int32_t*>(nullptr);
  KILN_TRY(const Tensor* t, input_tensor(args, i, ScalarType::kInt));
  if (t->numel != channels) return shape_mismatch(i, t->numel);
  return static_cast<const int32_t*>(t->data);
}

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

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
constexpr int64_t kLanes = 16;  // output pixels a Helium step sums (4 vectors of 4 int32)

// Whether pixels ox .. ox + 15 of a row take the Helium path: stride and dilation 1 along the
// row, and each of their windows inside it (no padding to skip).
bool helium_run(const ConvShape& s, int64_t ox) {
  return s.xs[3] == 1 && s.stride[1] == 1 && s.dilation[1] == 1 && ox - s.padding[1] >= 0 && ox + kLanes <= s.ow &&
         ox + kLanes - 1 - s.padding[1] + s.kw - 1 < s.w;
}

// pixel_sum of the 16 pixels ox .. ox + 15, each mod 2^32 (int32 lanes wrap), into sums[].
template <typename WeightAt>
void pixel_sums_16(const ConvShape& s, const int8_t* x, int64_t first_in, int64_t o, int64_t oy, int64_t ox,
                   WeightAt weight_at, int32_t sums[kLanes]) {
  int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
  const auto offset = static_cast<int32_t>(s.input_offset);
  for (int64_t ci = 0; ci < s.cin_g; ++ci) {
    const int8_t* plane = x + (first_in + ci) * s.xs[1];
    for (int64_t ky = 0; ky < s.kh; ++ky) {
      const int64_t iy = oy * s.stride[0] - s.padding[0] + ky * s.dilation[0];
      if (iy < 0 || iy >= s.h) continue;
      const int8_t* row = plane + iy * s.xs[2] + ox - s.padding[1];
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        const auto weight = static_cast<int32_t>(weight_at(o, ci, ky, kx));
        for (int j = 0; j < 4; ++j) {
          const int32x4_t v = vaddq_n_s32(vldrbq_s32(row + kx + 4 * j), offset);  // 4 bytes widened
          acc[j] = vmlaq_n_s32(acc[j], v, weight);
        }
      }
    }
  }
  for (int j = 0; j < 4; ++j) vst1q_s32(sums + 4 * j, acc[j]);
}
#endif

// weight_at(o, ci, ky, kx): the weight of output channel o, input channel ci of its group. Each
// pixel's bias plus sum wraps to int32; the Helium path (Cortex-M55, M85) sums 16 pixels of a
// row at a time where their windows lie inside it, the plain C path one pixel: equal mod 2^32.
template <typename WeightAt>
void convolve(const ConvShape& s, const int8_t* x, const int32_t* bias, const Requantization& q, int8_t* y,
              WeightAt weight_at) {
  for (int64_t b = 0; b < s.n; ++b) {
    const int8_t* batch = x + b * s.xs[0];
    for (int64_t o = 0; o < s.cout; ++o) {
      const int64_t first_in = o / s.cout_g * s.cin_g;
      const int64_t start = bias != nullptr ? bias[o] : 0;
      for (int64_t oy = 0; oy < s.oh; ++oy) {
        int8_t* out = y + b * s.ys[0] + o * s.ys[1] + oy * s.ys[2];
        auto write = [&](int64_t ox, int64_t sum) {
          out[ox * s.ys[3]] = clamp_to(q.apply(fixed::wrap32(start + sum), o) + s.output_offset, s.range);
        };
        for (int64_t ox = 0; ox < s.ow;) {
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
          if (helium_run(s, ox)) {
            int32_t sums[kLanes];
            pixel_sums_16(s, batch, first_in, o, oy, ox, weight_at, sums);
            for (int64_t lane = 0; lane < kLanes; ++lane) write(ox + lane, sums[lane]);
            ox += kLanes;
            continue;
          }
#endif
          write(ox, pixel_sum(s, batch, first_in, o, oy, ox, weight_at));
          ++ox;
        }
      }
    }
  }
}

// The rest both convolutions share: the bias (argument 2), the requantization (argument
// `requantize_at`), the int8 output (argument `out_at`) of s's shape, then convolve.
template <typename WeightAt>
Status convolve_into(KernelArgs& args, const Tensor& x, const ConvShape& s, size_t requantize_at, size_t out_at,
                     WeightAt weight_at) {
  KILN_TRY(const int32_t* bias, optional_channels(args, 2, s.cout));
  KILN_TRY(Requantization q, tensor_requantization(args, requantize_at, s.cout));
  const int64_t sizes[4] = {s.n, s.cout, s.oh, s.ow};
  KILN_TRY(Tensor * out, int8_output(args, out_at, sizes, 4, true));
  ConvShape shape = s;
  nchw_steps(*out, shape.ys);
  convolve(shape, s8(x), bias, q, s8(*out), weight_at);
  return {};
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
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = xs + r * in;
    for (int64_t o = 0; o < out_features; ++o) {
      // sum (x + a)(w + b) + bias = sum x w + b sum x + a sum w + n a b + bias, all mod 2^32
      const DotSums d = dot_sums(row, ws + o * in, in);
      const auto a = static_cast<uint32_t>(input_offset), b = static_cast<uint32_t>(filter_offset);
      uint32_t acc = d.xw + b * d.x;
      if (kernel_sum != nullptr) {
        acc += static_cast<uint32_t>(kernel_sum[o]);
      } else {
        acc += a * d.w + static_cast<uint32_t>(in) * a * b + static_cast<uint32_t>(bias != nullptr ? bias[o] : 0);
      }
      y[r * out_features + o] = clamp_to(q.apply(static_cast<int32_t>(acc), o) + output_offset, range);
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
  const int8_t* weight = s8(*w);
  const auto kh = static_cast<ptrdiff_t>(s.kh), kw = static_cast<ptrdiff_t>(s.kw);
  const auto cin = static_cast<ptrdiff_t>(s.cin_g);
  return convolve_into(args, *x, s, 8, 13, [=](ptrdiff_t o, ptrdiff_t ci, ptrdiff_t ky, ptrdiff_t kx) {
    return static_cast<int32_t>(weight[((o * kh + ky) * kw + kx) * cin + ci]);
  });
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
  const int8_t* weight = s8(*w);
  const auto kw = static_cast<ptrdiff_t>(s.kw), cout = static_cast<ptrdiff_t>(s.cout);
  return convolve_into(args, *x, s, 9, 14, [=](ptrdiff_t o, ptrdiff_t, ptrdiff_t ky, ptrdiff_t kx) {
    return static_cast<int32_t>(weight[(ky * kw + kx) * cout + o]);
  });
}

}  // namespace kiln::runtime::kernels
