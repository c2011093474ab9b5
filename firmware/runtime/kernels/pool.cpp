// aten::avg_pool2d.out (self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override, out) and aten::mean.out (self, dim = [2, 3]
// or [-2, -1], keepdim, dtype = None, out) on NCHW float32, as kiln.program.kernels:
//   avg_pool2d: 0 plus the window's values row by row, left to right (zero padding
//               included), divided by float(kh * kw); ceil_mode false, no
//               divisor_override, and count_include_pad or no padding.
//   mean:       0 plus the plane's values in row-major order, divided by float(h * w).
#include "../src/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {
constexpr int64_t kMaxParam = 1 << 16;
}

Status avg_pool2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  if (x->dim != 4) return unsupported(0, x->dim);
  int64_t kernel[2], stride[2], padding[2];
  KILN_CHECK(pair_arg(args, 1, 1, kMaxParam, kernel));
  size_t n_stride = 0;
  KILN_CHECK(int_list_arg(args, 2, stride, 2, &n_stride));
  if (n_stride == 0) {
    stride[0] = kernel[0], stride[1] = kernel[1];
  } else {
    KILN_CHECK(pair_arg(args, 2, 1, kMaxParam, stride));
  }
  KILN_CHECK(pair_arg(args, 3, 0, kMaxParam, padding));
  KILN_TRY(bool ceil_mode, bool_arg(args, 4));
  KILN_TRY(bool count_include_pad, bool_arg(args, 5));
  if (ceil_mode) return unsupported(4);
  if (!is_null(args, 6)) return unsupported(6);
  if (!count_include_pad && (padding[0] != 0 || padding[1] != 0)) return unsupported(5);
  const int64_t n = x->sizes[0], c = x->sizes[1], h = x->sizes[2], w = x->sizes[3];
  if (kernel[0] > h + 2 * padding[0] || kernel[1] > w + 2 * padding[1]) return shape_mismatch(1);
  const int64_t oh = (h + 2 * padding[0] - kernel[0]) / stride[0] + 1;
  const int64_t ow = (w + 2 * padding[1] - kernel[1]) / stride[1] + 1;
  KILN_TRY(Tensor* out, output_tensor(args, 7, ScalarType::kFloat));
  const int64_t sizes[4] = {n, c, oh, ow};
  KILN_CHECK(expect_sizes(*out, sizes, 4, 7));
  const float divisor = static_cast<float>(kernel[0] * kernel[1]);
  const float* in = f32(*x);
  float* y = f32(*out);
  for (int64_t plane = 0; plane < n * c; ++plane) {
    const float* p = in + plane * h * w;
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        float acc = 0.0f;
        for (int64_t i = 0; i < kernel[0]; ++i) {
          for (int64_t j = 0; j < kernel[1]; ++j) {
            int64_t row = oy * stride[0] + i - padding[0], col = ox * stride[1] + j - padding[1];
            bool inside = row >= 0 && row < h && col >= 0 && col < w;
            acc += inside ? p[row * w + col] : 0.0f;
          }
        }
        y[(plane * oh + oy) * ow + ox] = acc / divisor;
      }
    }
  }
  return {};
}

Status mean_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 4));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  if (x->dim != 4) return unsupported(0, x->dim);
  int64_t dims[2];
  size_t n_dims = 0;
  KILN_CHECK(int_list_arg(args, 1, dims, 2, &n_dims));
  if (n_dims != 2) return unsupported(1);
  KILN_TRY(size_t d0, dim_index(dims[0], 4, 1));
  KILN_TRY(size_t d1, dim_index(dims[1], 4, 1));
  if (d0 != 2 || d1 != 3) return unsupported(1);
  KILN_TRY(bool keepdim, bool_arg(args, 2));
  if (!is_null(args, 3)) return unsupported(3);
  KILN_TRY(Tensor* out, output_tensor(args, 4, ScalarType::kFloat));
  const int64_t n = x->sizes[0], c = x->sizes[1], area = int64_t{x->sizes[2]} * x->sizes[3];
  const int64_t sizes[4] = {n, c, 1, 1};
  KILN_CHECK(expect_sizes(*out, sizes, keepdim ? 4 : 2, 4));
  const float divisor = static_cast<float>(area);
  const float* in = f32(*x);
  float* y = f32(*out);
  for (int64_t plane = 0; plane < n * c; ++plane) {
    float acc = 0.0f;
    for (int64_t k = 0; k < area; ++k) acc += in[plane * area + k];
    y[plane] = acc / divisor;
  }
  return {};
}

}  // namespace kiln::runtime::kernels
