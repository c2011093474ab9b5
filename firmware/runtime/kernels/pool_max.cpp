// aten::max_pool2d.out (self, kernel_size, stride, padding, dilation, ceil_mode, out) on
// (N, )C, H, W float32 or int8, as kiln.program.kernels.movement:
//   output size: floor (ceil_mode: ceil) of (size + 2 pad - dilation (kernel - 1) - 1) / stride,
//                plus 1; with ceil_mode a window may not start in the trailing padding
//   each output: the running max over the window's positions inside the input, row by row,
//                left to right, starting from -inf (int8: -128); a value replaces it when
//                greater or NaN (PyTorch's rule)
// max_pool2d() does the work for cortex_m::quantized_max_pool2d and quantized_max_pool2d_s16
// too (quantized_select.cpp, quantized_pool_s16.cpp), which clamp their int8 or int16 result to
// the activation range. The input and out tensor are each in either DimOrder (a channels-last
// one 4-D).
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
  int64_t images, channels, h, w, oh, ow, kernel[2], stride[2], pad[2], dilation[2];
  int64_t in_steps[4], out_steps[4];  // element steps in memory of image, channel, row, column
};

// Steps in memory of a (N, )C, H, W tensor's image, channel, row and column, by its DimOrder
// (a channels-last tensor is 4-D).
void steps_of(const Tensor& t, int64_t steps[4]) {
  if (t.dim == 4) {
    nchw_steps(t, steps);
    return;
  }
  steps[0] = 0, steps[1] = int64_t{t.sizes[1]} * t.sizes[2], steps[2] = t.sizes[2], steps[3] = 1;
}

template <typename T>
void max_pool(const T* in, T* out, const Geometry& g, T lowest, T low, T high) {
  const int64_t* is = g.in_steps;
  const int64_t* os = g.out_steps;
  for (int64_t n = 0; n < g.images; ++n) {
    for (int64_t c = 0; c < g.channels; ++c) {
      const T* p = in + n * is[0] + c * is[1];
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          T acc = lowest;
          for (int64_t i = 0; i < g.kernel[0]; ++i) {
            const int64_t row = oy * g.stride[0] - g.pad[0] + i * g.dilation[0];
            if (row < 0 || row >= g.h) continue;
            for (int64_t j = 0; j < g.kernel[1]; ++j) {
              const int64_t col = ox * g.stride[1] - g.pad[1] + j * g.dilation[1];
              if (col < 0 || col >= g.w) continue;
              const T v = p[row * is[2] + col * is[3]];
              if (v > acc || v != v) acc = v;
            }
          }
          out[n * os[0] + c * os[1] + oy * os[2] + ox * os[3]] = acc < low ? low : (acc > high ? high : acc);
        }
      }
    }
  }
}

}  // namespace

Status max_pool2d(KernelArgs& args, size_t arity, const int32_t* range) {
  KILN_CHECK(expect_arity(args, arity));
  if (args[0].kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(args[0].kind));
  const ScalarType type = args[0].t.type;
  const bool s16 = type == ScalarType::kShort && range != nullptr;  // cortex_m's int16 form only
  if (type != ScalarType::kFloat && type != ScalarType::kChar && !s16)
    return unsupported(0, static_cast<uint32_t>(type));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, type));
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
  g.images = d == 4 ? x->sizes[0] : 1, g.channels = x->sizes[d - 3];
  g.oh = pool_output_size(g.h, g.kernel[0], g.stride[0], g.pad[0], g.dilation[0], ceil_mode);
  g.ow = pool_output_size(g.w, g.kernel[1], g.stride[1], g.pad[1], g.dilation[1], ceil_mode);
  if (g.oh < 1 || g.ow < 1) return shape_mismatch(1);
  KILN_TRY(Tensor * out, output_tensor_any_order(args, arity, type));
  int64_t sizes[4];
  for (size_t k = 0; k + 2 < d; ++k) sizes[k] = x->sizes[k];
  sizes[d - 2] = g.oh, sizes[d - 1] = g.ow;
  KILN_CHECK(expect_sizes(*out, sizes, d, arity));
  steps_of(*x, g.in_steps);
  steps_of(*out, g.out_steps);
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
