// aten::max_pool2d.out (self, kernel_size, stride, padding, dilation, ceil_mode, out) on
// (N, )C, H, W float32 or int8, as kiln.program.kernels.movement:
//   output size: floor (ceil_mode: ceil) of (size + 2 pad - dilation (kernel - 1) - 1) / stride,
//                plus 1; with ceil_mode a window may not start in the trailing padding
//   each output: the running max over the window's positions inside the input, row by row,
//                left to right, starting from -inf (int8: -128); a value replaces it when
//                greater or NaN (PyTorch's rule)
// max_pool2d() does the work for cortex_m::quantized_max_pool2d and quantized_max_pool2d_s16
// too (quantized_select.cpp, quantized_pool_s16.cpp), which clamp their int8 or int16 result to
// the activation range.
#include "kiln/runtime/try.h"
#include "movement.h"

namespace kiln::runtime::kernels {

namespace {

// Kernel sizes, strides, padding and dilation at most 2^16 (pair_arg checks) and sizes at
// most 2^31: the window arithmetic below stays under 2^48.
constexpr int64_t kMaxParam = 1 << 16;

int64_t pool_output_size(int64_t size, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

struct Geometry {
  int64_t planes, h, w, oh, ow, kernel[2], stride[2], pad[2], dilation[2];
};

template <typename T>
void max_pool(const T* in, T* out, const Geometry& g, T lowest, T low, T high) {
  for (int64_t plane = 0; plane < g.planes; ++plane) {
    const T* p = in + plane * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T acc = lowest;
        for (int64_t i = 0; i < g.kernel[0]; ++i) {
          const int64_t row = oy * g.stride[0] - g.pad[0] + i * g.dilation[0];
          if (row < 0 || row >= g.h) continue;
          for (int64_t j = 0; j < g.kernel[1]; ++j) {
            const int64_t col = ox * g.stride[1] - g.pad[1] + j * g.dilation[1];
            if (col < 0 || col >= g.w) continue;
            const T v = p[row * g.w + col];
            if (v > acc || v != v) acc = v;
          }
        }
        out[(plane * g.oh + oy) * g.ow + ox] = acc < low ? low : (acc > high ? high : acc);
      }
    }
  }
}

}  // namespace

Status max_pool2d(KernelArgs& args, size_t arity, const int32_t* range) {
  KILN_CHECK(expect_arity(args, arity));
  KILN_TRY(const Tensor* x, any_tensor(args, 0));
  const bool s16 = x->type == ScalarType::kShort && range != nullptr;  // cortex_m's int16 form only
  if (x->type != ScalarType::kFloat && x->type != ScalarType::kChar && !s16)
    return unsupported(0, static_cast<uint32_t>(x->type));
  if (x->dim != 3 && x->dim != 4) return unsupported(0, x->dim);
  Geometry g{};
  KILN_CHECK(pair_arg(args, 1, 1, kMaxParam, g.kernel));
  size_t n_stride = 0;
  int64_t stride[2];
  KILN_CHECK(int_list_arg(args, 2, stride, 2, &n_stride));
  if (n_stride == 0) {
    g.stride[0] = g.kernel[0], g.stride[1] = g.kernel[1];
  } else {
    KILN_CHECK(pair_arg(args, 2, 1, kMaxParam, g.stride));
  }
  KILN_CHECK(pair_arg(args, 3, 0, kMaxParam, g.pad));
  KILN_CHECK(pair_arg(args, 4, 1, kMaxParam, g.dilation));
  KILN_TRY(bool ceil_mode, bool_arg(args, 5));
  for (size_t k = 0; k < 2; ++k) {
    if (2 * g.pad[k] > g.kernel[k]) return unsupported(3, static_cast<uint32_t>(k));  // PyTorch: pad <= kernel / 2
  }
  const size_t d = x->dim;
  g.h = x->sizes[d - 2], g.w = x->sizes[d - 1];
  KILN_TRY(g.planes, size_product(*x, 0, d - 2, 0));
  g.oh = pool_output_size(g.h, g.kernel[0], g.stride[0], g.pad[0], g.dilation[0], ceil_mode);
  g.ow = pool_output_size(g.w, g.kernel[1], g.stride[1], g.pad[1], g.dilation[1], ceil_mode);
  if (g.oh < 1 || g.ow < 1) return shape_mismatch(1);
  KILN_TRY(Tensor * out, output_like(args, arity, *x));
  int64_t sizes[4];
  for (size_t k = 0; k + 2 < d; ++k) sizes[k] = x->sizes[k];
  sizes[d - 2] = g.oh, sizes[d - 1] = g.ow;
  KILN_CHECK(expect_sizes(*out, sizes, d, arity));
  if (x->type == ScalarType::kFloat) {
    max_pool(f32(*x), f32(*out), g, -__builtin_inff(), -__builtin_inff(), __builtin_inff());
  } else if (s16) {
    max_pool(static_cast<const int16_t*>(x->data), static_cast<int16_t*>(out->data), g, int16_t{INT16_MIN},
             static_cast<int16_t>(range[0]), static_cast<int16_t>(range[1]));
  } else {
    const auto low = static_cast<int8_t>(range != nullptr ? range[0] : INT8_MIN);
    const auto high = static_cast<int8_t>(range != nullptr ? range[1] : INT8_MAX);
    max_pool(static_cast<const int8_t*>(x->data), static_cast<int8_t*>(out->data), g, int8_t{-128}, low, high);
  }
  return {};
}

Status max_pool2d_out(KernelArgs& args) { return max_pool2d(args, 6, nullptr); }

}  // namespace kiln::runtime::kernels
