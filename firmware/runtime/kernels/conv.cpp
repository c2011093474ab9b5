// aten::convolution.out (input, weight, bias, stride, padding, dilation, transposed,
// output_padding, groups, out) and aten::linear.out (input, weight, bias, out), float32.
// Each output starts at 0, adds its bias, then the products in (input channel, kernel row,
// kernel column) order, resp. input order.
//   convolution: weight (C_out, C_in / groups, kh, kw); zero padding contributes
//     0 * weight like any other product, as kiln.program.kernels.nn's padded array does.
//   transposed: weight (C_in, C_out / groups, kh, kw); input (iy, ix) feeds output
//     (iy*s - p + i*d, ix*s - p + j*d); an output adds only the products that reach it.
//     Output size (size - 1)*s - 2p + d*(k - 1) + output_padding + 1, output_padding below
//     the stride or the dilation, as PyTorch requires.
#include "kiln/runtime/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxParam = 1 << 16;

Result<const float*> optional_bias(const KernelArgs& args, size_t i, int64_t channels) {
  if (is_null(args, i)) return static_cast<const float*>(nullptr);
  KILN_TRY(const Tensor* bias, input_tensor(args, i, ScalarType::kFloat));
  if (bias->dim != 1 || bias->sizes[0] != channels) return shape_mismatch(i);
  return f32(*bias);
}

// Sizes in int64: each at most 2^31 and each stride, padding, dilation and output padding
// at most 2^16 (pair_arg checks), so the shape arithmetic of those stays below 2^48. The
// groups, any int64 in the program, is checked against the channels and multiplied only
// through checked_mul.
struct ConvShape {
  int64_t n, c, h, w, cout, cin_g, cout_g, kh, kw, groups, oh, ow;
  int64_t stride[2], padding[2], dilation[2], output_padding[2];
  bool transposed;
};

int64_t transposed_size(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
  return (size - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

Status conv_params(const KernelArgs& args, const Tensor& x, const Tensor& weight, ConvShape* s) {
  if (x.dim != 4) return unsupported(0, x.dim);
  if (weight.dim != 4) return shape_mismatch(1, weight.dim);
  KILN_CHECK(pair_arg(args, 3, 1, kMaxParam, s->stride));
  KILN_CHECK(pair_arg(args, 4, 0, kMaxParam, s->padding));
  KILN_CHECK(pair_arg(args, 5, 1, kMaxParam, s->dilation));
  KILN_TRY(s->transposed, bool_arg(args, 6));
  KILN_CHECK(pair_arg(args, 7, 0, kMaxParam, s->output_padding));
  KILN_TRY(s->groups, int_arg(args, 8));
  s->n = x.sizes[0], s->c = x.sizes[1], s->h = x.sizes[2], s->w = x.sizes[3];
  s->kh = weight.sizes[2], s->kw = weight.sizes[3];
  if (s->groups < 1 || s->groups > s->c) return shape_mismatch(8, static_cast<uint32_t>(s->groups));
  if (s->kh < 1 || s->kw < 1) return shape_mismatch(1);
  if (s->transposed) {
    if (weight.sizes[0] != s->c || s->c % s->groups != 0) return shape_mismatch(8, static_cast<uint32_t>(s->groups));
    s->cin_g = s->c / s->groups;
    s->cout_g = weight.sizes[1];
    KILN_TRY(s->cout, checked_mul(s->cout_g, s->groups, 8));
    for (size_t k = 0; k < 2; ++k) {
      const int64_t limit = s->stride[k] > s->dilation[k] ? s->stride[k] : s->dilation[k];
      if (s->output_padding[k] >= limit) return unsupported(7, static_cast<uint32_t>(s->output_padding[k]));
    }
    if (s->h < 1 || s->w < 1) return unsupported(0);
    s->oh = transposed_size(s->h, s->kh, s->stride[0], s->padding[0], s->dilation[0], s->output_padding[0]);
    s->ow = transposed_size(s->w, s->kw, s->stride[1], s->padding[1], s->dilation[1], s->output_padding[1]);
    if (s->oh < 1 || s->ow < 1) return shape_mismatch(4);
    return {};
  }
  if (s->output_padding[0] != 0 || s->output_padding[1] != 0) return unsupported(7);
  s->cout = weight.sizes[0], s->cin_g = weight.sizes[1];
  KILN_TRY(const int64_t channels, checked_mul(s->cin_g, s->groups, 8));
  if (s->cout % s->groups != 0 || channels != s->c) return shape_mismatch(8, static_cast<uint32_t>(s->groups));
  s->cout_g = s->cout / s->groups;
  int64_t span_h = s->dilation[0] * (s->kh - 1) + 1, span_w = s->dilation[1] * (s->kw - 1) + 1;
  int64_t ph = s->h + 2 * s->padding[0], pw = s->w + 2 * s->padding[1];
  if (span_h > ph || span_w > pw) return shape_mismatch(1);
  s->oh = (ph - span_h) / s->stride[0] + 1;
  s->ow = (pw - span_w) / s->stride[1] + 1;
  return {};
}

// The padded input's value at (row, col) of channel plane `plane`.
float padded_at(const float* plane, const ConvShape& s, int64_t row, int64_t col) {
  row -= s.padding[0];
  col -= s.padding[1];
  if (row < 0 || row >= s.h || col < 0 || col >= s.w) return 0.0f;
  return plane[row * s.w + col];
}

// Output (b, co, oy, ox) of a convolution, bias already in acc.
float convolve(const float* in, const float* w, const ConvShape& s, int64_t b, int64_t co, int64_t oy, int64_t ox,
               float acc) {
  const int64_t g = co / s.cout_g;
  for (int64_t ci = 0; ci < s.cin_g; ++ci) {
    const float* plane = in + ((b * s.c) + g * s.cin_g + ci) * s.h * s.w;
    const float* kernel = w + ((co * s.cin_g) + ci) * s.kh * s.kw;
    for (int64_t i = 0; i < s.kh; ++i) {
      for (int64_t j = 0; j < s.kw; ++j) {
        float v = padded_at(plane, s, oy * s.stride[0] + i * s.dilation[0], ox * s.stride[1] + j * s.dilation[1]);
        acc += v * kernel[i * s.kw + j];
      }
    }
  }
  return acc;
}

// The input index along one axis feeding output `o` through kernel tap `k`, or -1.
int64_t source(int64_t o, int64_t k, int64_t size, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t t = o + pad - k * dilation;
  if (t < 0 || t % stride != 0 || t / stride >= size) return -1;
  return t / stride;
}

// Output (b, co, oy, ox) of a transposed convolution, bias already in acc.
float convolve_transposed(const float* in, const float* w, const ConvShape& s, int64_t b, int64_t co, int64_t oy,
                          int64_t ox, float acc) {
  const int64_t g = co / s.cout_g, col = co % s.cout_g;
  for (int64_t ci = g * s.cin_g; ci < (g + 1) * s.cin_g; ++ci) {
    const float* plane = in + (b * s.c + ci) * s.h * s.w;
    const float* kernel = w + (ci * s.cout_g + col) * s.kh * s.kw;
    for (int64_t i = 0; i < s.kh; ++i) {
      const int64_t iy = source(oy, i, s.h, s.stride[0], s.padding[0], s.dilation[0]);
      if (iy < 0) continue;
      for (int64_t j = 0; j < s.kw; ++j) {
        const int64_t ix = source(ox, j, s.w, s.stride[1], s.padding[1], s.dilation[1]);
        if (ix >= 0) acc += plane[iy * s.w + ix] * kernel[i * s.kw + j];
      }
    }
  }
  return acc;
}

}  // namespace

Status convolution_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 9));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(const Tensor* weight, input_tensor(args, 1, ScalarType::kFloat));
  ConvShape s;
  KILN_CHECK(conv_params(args, *x, *weight, &s));
  KILN_TRY(const float* bias, optional_bias(args, 2, s.cout));
  KILN_TRY(Tensor * out, output_tensor(args, 9, ScalarType::kFloat));
  const int64_t sizes[4] = {s.n, s.cout, s.oh, s.ow};
  KILN_CHECK(expect_sizes(*out, sizes, 4, 9));
  const float* in = f32(*x);
  const float* w = f32(*weight);
  float* y = f32(*out);
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t co = 0; co < s.cout; ++co) {
      for (int64_t oy = 0; oy < s.oh; ++oy) {
        for (int64_t ox = 0; ox < s.ow; ++ox) {
          float acc = 0.0f;
          if (bias != nullptr) acc += bias[co];
          acc =
              s.transposed ? convolve_transposed(in, w, s, b, co, oy, ox, acc) : convolve(in, w, s, b, co, oy, ox, acc);
          y[((b * s.cout + co) * s.oh + oy) * s.ow + ox] = acc;
        }
      }
    }
  }
  return {};
}

Status linear_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(const Tensor* weight, input_tensor(args, 1, ScalarType::kFloat));
  if (x->dim < 1) return unsupported(0);
  const int32_t in_features = x->sizes[x->dim - 1];
  if (weight->dim != 2 || weight->sizes[1] != in_features) return shape_mismatch(1);
  const int32_t out_features = weight->sizes[0];
  KILN_TRY(const float* bias, optional_bias(args, 2, int64_t{out_features}));
  KILN_TRY(Tensor * out, output_tensor(args, 3, ScalarType::kFloat));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d + 1 < x->dim; ++d) sizes[d] = x->sizes[d];
  sizes[x->dim - 1] = out_features;
  KILN_CHECK(expect_sizes(*out, sizes, x->dim, 3));
  const uint32_t rows =
      in_features ? x->numel / static_cast<uint32_t>(in_features) : out->numel / (out_features ? out_features : 1);
  const float* in = f32(*x);
  const float* w = f32(*weight);
  float* y = f32(*out);
  for (uint32_t r = 0; r < rows; ++r) {
    for (int32_t o = 0; o < out_features; ++o) {
      float acc = 0.0f;
      if (bias != nullptr) acc += bias[o];
      for (int32_t k = 0; k < in_features; ++k) acc += in[r * in_features + k] * w[o * in_features + k];
      y[r * out_features + o] = acc;
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
