// Integer cortex_m kernels of two int8 operands' products, as kiln.program.kernels.integer
// computes them (ExecuTorch's schemas, CMSIS-NN's arithmetic; fixed_point.h). Each output's sum
// of products (plus its bias) wraps to int32 before the requantize, as CMSIS-NN's int32
// accumulator.
//   cortex_m::quantized_batch_matmul.out (lhs, lhs_zero_point, rhs_transposed, rhs_zero_point,
//     output_zero_point, output_multiplier, output_shift, scratch, out): lhs [.., M, K],
//     rhs_transposed [.., N, K] with the same leading dims (ExecuTorch's: one, B); out [.., M, N]
//     = requantize(sum_k (lhs + lhs_zero_point)(rhs + rhs_zero_point)) + output_zero_point,
//     clamped to int8; the "zero points" are offsets (negated zero points, CMSIS-NN's
//     convention). Each row pair is one dot_sums (dot.h: Helium, DSP or plain C).
//   cortex_m::quantized_batch_matmul_s16.out (lhs, rhs_transposed, output_multiplier,
//     output_shift, activation_min, activation_max, scratch, out): kiln's, CMSIS-NN's
//     arm_batch_matmul_s16: int16 operands and result, zero points 0; the sum exact in int64
//     (dot16.h), requantize_s64 (fixed_point.h), clamped to the activation range (int16 values).
//   cortex_m::quantized_transpose_conv2d.out (input, weight, bias?, stride, padding,
//     output_padding, dilation, input_offset, output_offset, requantize_multipliers,
//     requantize_shifts, activation_min, activation_max, scratch, output_scratch, out): input
//     NCHW (input and out each in either DimOrder), weight OHWI (one group); input pixel (y, x) adds (x + input_offset)
//     w[o, i, j] to output pixel (y stride - padding + i dilation, ..); multipliers and shifts Int tensors, one per
//     output channel. The scratch tensors are ExecuTorch's and not read.
#include "dot.h"
#include "dot16.h"
#include "kiln/runtime/try.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxParam = 1 << 16;  // offsets, strides, padding, dilation
constexpr int64_t kS16MaxInner = 1 << 16;  // int16 sums of this many products stay within 2^47
const int32_t kInt8Range[2] = {INT8_MIN, INT8_MAX};

}  // namespace

namespace {

// The operands of a batch matmul: lhs (position 0) [.., M, K], rhs_transposed (position `rhs_at`)
// [.., N, K] of `type`, the same leading dims; the out tensor (position `out_at`) [.., M, N].
struct Bmm {
  const Tensor *lhs, *rhs;
  Tensor* out;
  int64_t batches, m, n, k;
};

Result<Bmm> bmm_operands(const KernelArgs& args, size_t rhs_at, size_t out_at, ScalarType type) {
  Bmm b{};
  KILN_TRY(b.lhs, input_tensor(args, 0, type));
  KILN_TRY(b.rhs, input_tensor(args, rhs_at, type));
  const size_t d = b.lhs->dim;
  if (d < 2) return unsupported(0, static_cast<uint32_t>(d));
  if (b.rhs->dim != d) return shape_mismatch(rhs_at, b.rhs->dim);
  for (size_t i = 0; i + 1 < d; ++i) {
    const size_t dim = i + 2 < d ? i : d - 1;  // the leading dims, then K
    if (b.rhs->sizes[dim] != b.lhs->sizes[dim]) return shape_mismatch(rhs_at, static_cast<uint32_t>(dim));
  }
  b.m = b.lhs->sizes[d - 2], b.n = b.rhs->sizes[d - 2], b.k = b.lhs->sizes[d - 1];
  int64_t sizes[kMaxDims];
  for (size_t i = 0; i + 2 < d; ++i) sizes[i] = b.lhs->sizes[i];
  sizes[d - 2] = b.m, sizes[d - 1] = b.n;
  KILN_TRY(b.out, output_tensor(args, out_at, type));
  KILN_CHECK(expect_sizes(*b.out, sizes, d, out_at));
  KILN_TRY(b.batches, size_product(*b.lhs, 0, d - 2, 0));
  return b;
}

}  // namespace

Status cortex_m_quantized_batch_matmul_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 8));
  KILN_TRY(int64_t lhs_offset, ranged_int(args, 1, -kMaxParam, kMaxParam));
  KILN_TRY(int64_t rhs_offset, ranged_int(args, 3, -kMaxParam, kMaxParam));
  KILN_TRY(int64_t out_zp, ranged_int(args, 4, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t multiplier, ranged_int(args, 5, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t shift, ranged_int(args, 6, -31, 31));
  if (args[7].kind != ValueKind::kTensor) return bad_argument(7);
  KILN_TRY(Bmm bmm, bmm_operands(args, 2, 8, ScalarType::kChar));
  const int64_t m = bmm.m, n = bmm.n, k = bmm.k;
  // sum (x + a)(w + b) = sum xw + b sum x + a sum w + k a b, every term mod 2^32.
  const auto a = static_cast<uint32_t>(lhs_offset), b = static_cast<uint32_t>(rhs_offset);
  const uint32_t constant = static_cast<uint32_t>(k) * a * b;
  int8_t* y = s8(*bmm.out);
  for (int64_t batch = 0; batch < bmm.batches; ++batch) {
    const int8_t* left = s8(*bmm.lhs) + batch * m * k;
    const int8_t* right = s8(*bmm.rhs) + batch * n * k;
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t col = 0; col < n; ++col) {
        const DotSums s = dot_sums(left + row * k, right + col * k, k);
        const auto acc = static_cast<int32_t>(s.xw + b * s.x + a * s.w + constant);
        const int32_t v = fixed::requantize(acc, static_cast<int32_t>(multiplier), static_cast<int32_t>(shift));
        *y++ = clamp_to(v + out_zp, kInt8Range);
      }
    }
  }
  return {};
}

Status cortex_m_quantized_batch_matmul_s16_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  KILN_TRY(int64_t multiplier, ranged_int(args, 2, INT32_MIN, INT32_MAX));
  KILN_TRY(int64_t shift, ranged_int(args, 3, -31, 14));
  KILN_TRY(int64_t low, ranged_int(args, 4, INT16_MIN, INT16_MAX));
  KILN_TRY(int64_t high, ranged_int(args, 5, low, INT16_MAX));
  if (args[6].kind != ValueKind::kTensor) return bad_argument(6);
  KILN_TRY(Bmm bmm, bmm_operands(args, 1, 7, ScalarType::kShort));
  const int64_t m = bmm.m, n = bmm.n, k = bmm.k;
  if (k > kS16MaxInner) return unsupported(0, static_cast<uint32_t>(bmm.lhs->dim - 1));
  const auto* left = static_cast<const int16_t*>(bmm.lhs->data);
  const auto* right = static_cast<const int16_t*>(bmm.rhs->data);
  auto* y = static_cast<int16_t*>(bmm.out->data);
  for (int64_t batch = 0; batch < bmm.batches; ++batch, left += m * k, right += n * k) {
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t col = 0; col < n; ++col) {
        const int32_t v = fixed::requantize_s64(dot_s16(left + row * k, right + col * k, k),
                                                static_cast<int32_t>(multiplier), static_cast<int32_t>(shift));
        *y++ = static_cast<int16_t>(v < low ? low : (v > high ? high : v));
      }
    }
  }
  return {};
}

namespace {

struct TransposeConv {
  int64_t n, c, h, w, cout, kh, kw, oh, ow;
  int64_t in_steps[4];  // element steps in the input's memory of N, C, H, W (its DimOrder)
  int64_t stride[2], padding[2], output_padding[2], dilation[2];
  int64_t input_offset, output_offset;
  int32_t range[2];
  const int32_t *bias, *multipliers, *shifts;
};

// Arguments 3 .. 14 into t (input and weight sizes already in it).
Status transpose_conv_args(const KernelArgs& args, TransposeConv* t) {
  KILN_CHECK(pair_arg(args, 3, 1, kMaxParam, t->stride));
  KILN_CHECK(pair_arg(args, 4, 0, kMaxParam, t->padding));
  KILN_CHECK(pair_arg(args, 5, 0, kMaxParam, t->output_padding));
  KILN_CHECK(pair_arg(args, 6, 1, kMaxParam, t->dilation));
  for (size_t k = 0; k < 2; ++k) {  // PyTorch: output padding below the stride or the dilation
    if (t->output_padding[k] >= t->stride[k] && t->output_padding[k] >= t->dilation[k])
      return unsupported(5, static_cast<uint32_t>(k));
  }
  KILN_TRY(t->input_offset, ranged_int(args, 7, -kMaxParam, kMaxParam));
  KILN_TRY(t->output_offset, ranged_int(args, 8, INT32_MIN, INT32_MAX));
  KILN_TRY(const Tensor* m, input_tensor(args, 9, ScalarType::kInt));
  KILN_TRY(const Tensor* s, input_tensor(args, 10, ScalarType::kInt));
  if (m->numel != t->cout) return shape_mismatch(9, m->numel);
  if (s->numel != t->cout) return shape_mismatch(10, s->numel);
  t->multipliers = static_cast<const int32_t*>(m->data), t->shifts = static_cast<const int32_t*>(s->data);
  for (int64_t o = 0; o < t->cout; ++o) {
    if (t->shifts[o] < -31 || t->shifts[o] > 31) return unsupported(10, static_cast<uint32_t>(o));
  }
  KILN_CHECK(activation_range(args, 11, 12, t->range));
  if (args[13].kind != ValueKind::kTensor) return bad_argument(13);
  if (args[14].kind != ValueKind::kTensor) return bad_argument(14);
  t->oh = (t->h - 1) * t->stride[0] - 2 * t->padding[0] + t->dilation[0] * (t->kh - 1) + t->output_padding[0] + 1;
  t->ow = (t->w - 1) * t->stride[1] - 2 * t->padding[1] + t->dilation[1] * (t->kw - 1) + t->output_padding[1] + 1;
  if (t->oh < 1 || t->ow < 1) return shape_mismatch(0);
  return {};
}

// The input coordinate whose tap `k` reaches output coordinate o along one dim, or -1.
int64_t source_of(int64_t o, int64_t k, int64_t stride, int64_t padding, int64_t dilation, int64_t size) {
  const int64_t at = o + padding - k * dilation;
  if (at < 0 || at % stride != 0 || at / stride >= size) return -1;
  return at / stride;
}

// Output pixel (oy, ox) of channel o of image `image`: bias plus the sum of its taps' products,
// mod 2^32 (each product |x + offset| < 2^17 times |w| <= 128 fits an int32).
int32_t transpose_conv_sum(const TransposeConv& t, const int8_t* x, const int8_t* w, int64_t image, int64_t o,
                           int64_t oy, int64_t ox) {
  uint32_t acc = t.bias != nullptr ? static_cast<uint32_t>(t.bias[o]) : 0u;
  const auto offset = static_cast<int32_t>(t.input_offset);
  for (int64_t ky = 0; ky < t.kh; ++ky) {
    const int64_t iy = source_of(oy, ky, t.stride[0], t.padding[0], t.dilation[0], t.h);
    if (iy < 0) continue;
    for (int64_t kx = 0; kx < t.kw; ++kx) {
      const int64_t ix = source_of(ox, kx, t.stride[1], t.padding[1], t.dilation[1], t.w);
      if (ix < 0) continue;
      const int8_t* taps = w + ((o * t.kh + ky) * t.kw + kx) * t.c;  // OHWI: the input channels
      const int8_t* pixel = x + image * t.in_steps[0] + iy * t.in_steps[2] + ix * t.in_steps[3];
      for (int64_t ci = 0; ci < t.c; ++ci) {
        acc += static_cast<uint32_t>((pixel[ci * t.in_steps[1]] + offset) * static_cast<int32_t>(taps[ci]));
      }
    }
  }
  return static_cast<int32_t>(acc);
}

}  // namespace

Status cortex_m_quantized_transpose_conv2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 15));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* weight, input_tensor(args, 1, ScalarType::kChar));
  if (x->dim != 4) return unsupported(0, x->dim);
  if (weight->dim != 4 || weight->sizes[3] != x->sizes[1]) return shape_mismatch(1);
  TransposeConv t{};
  t.n = x->sizes[0], t.c = x->sizes[1], t.h = x->sizes[2], t.w = x->sizes[3];
  t.cout = weight->sizes[0], t.kh = weight->sizes[1], t.kw = weight->sizes[2];
  if (!is_null(args, 2)) {
    KILN_TRY(const Tensor* bias, input_tensor(args, 2, ScalarType::kInt));
    if (bias->numel != t.cout) return shape_mismatch(2, bias->numel);
    t.bias = static_cast<const int32_t*>(bias->data);
  }
  KILN_CHECK(transpose_conv_args(args, &t));
  const int64_t sizes[4] = {t.n, t.cout, t.oh, t.ow};
  KILN_TRY(Tensor * out, int8_output(args, 15, sizes, 4, true));
  if (out->numel == 0) return {};
  nchw_steps(*x, t.in_steps);
  int64_t os[4];
  nchw_steps(*out, os);
  int8_t* y = s8(*out);
  for (int64_t image = 0; image < t.n; ++image) {
    for (int64_t o = 0; o < t.cout; ++o) {
      for (int64_t oy = 0; oy < t.oh; ++oy) {
        for (int64_t ox = 0; ox < t.ow; ++ox) {
          const int32_t acc = transpose_conv_sum(t, s8(*x), s8(*weight), image, o, oy, ox);
          y[image * os[0] + o * os[1] + oy * os[2] + ox * os[3]] =
              clamp_to(fixed::requantize(acc, t.multipliers[o], t.shifts[o]) + t.output_offset, t.range);
        }
      }
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
