// Average pooling over (N,) C, H, W float32, as kiln.program.kernels.nn:
//   aten::avg_pool2d.out (self, kernel_size, stride ([] = kernel_size), padding, ceil_mode,
//     count_include_pad, divisor_override, out): PyTorch's rules. Output size
//     floor((size + 2p - k (+ s - 1 with ceil_mode)) / s) + 1, less one with ceil_mode when
//     the last window would start at or beyond size + p. Window o covers [o*s - p, o*s - p + k)
//     clipped to [-p, size + p) (its padded size) and then to [0, size); the divisor is
//     divisor_override, else the padded window's size with count_include_pad, else the
//     clipped window's. Padding at most half the kernel, as PyTorch requires.
//   aten::_adaptive_avg_pool2d.out (self, output_size, out): window o covers
//     [floor(o * size / out), ceil((o + 1) * size / out)); the divisor is its size.
// Each output is 0 plus its window's values row by row, left to right, then divided once
// by float(divisor), in float32.
#include "kiln/runtime/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {

// Kernel sizes, strides and padding at most 2^16 (pair_arg checks) and sizes at most 2^31:
// the window arithmetic below stays under 2^48; a divisor_override at most 2^32.
constexpr int64_t kMaxParam = 1 << 16;

struct Window {
  int64_t start, end;  // [start, end) within the input
};

// An input of 3 (C, H, W) or 4 (N, C, H, W) dims as planes of h x w (h, w >= 1); `planes`
// is only used when the input has elements (then planes * h * w == numel).
struct Planes {
  int64_t planes, h, w;
  size_t dim;
};

Result<Planes> planes_of(const Tensor& x) {
  if (x.dim != 3 && x.dim != 4) return unsupported(0, x.dim);
  Planes p{1, x.sizes[x.dim - 2], x.sizes[x.dim - 1], x.dim};
  if (p.h < 1 || p.w < 1) return unsupported(0, 0);  // PyTorch pools no empty plane either
  KILN_TRY(p.planes, size_product(x, 0, x.dim - 2, 0));
  return p;
}

// The out tensor: x's sizes with H, W replaced by oh, ow.
Result<Tensor*> pooled_output(const KernelArgs& args, size_t n, const Tensor& x, int64_t oh, int64_t ow) {
  KILN_TRY(Tensor * out, output_tensor(args, n, ScalarType::kFloat));
  int64_t sizes[4];
  for (size_t d = 0; d + 2 < x.dim; ++d) sizes[d] = x.sizes[d];
  sizes[x.dim - 2] = oh, sizes[x.dim - 1] = ow;
  KILN_CHECK(expect_sizes(*out, sizes, x.dim, n));
  return out;
}

// windows(oy, ox, &rows, &cols, &divisor) gives each output's window and divisor.
template <typename Windows>
void average(const Tensor& x, const Planes& p, Tensor& out, int64_t oh, int64_t ow, Windows windows) {
  if (x.numel == 0 || out.numel == 0) return;
  const float* in = f32(x);
  float* y = f32(out);
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const float* src = in + plane * p.h * p.w;
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        Window rows, cols;
        int64_t divisor;
        windows(oy, ox, &rows, &cols, &divisor);
        float acc = 0.0f;
        for (int64_t r = rows.start; r < rows.end; ++r) {
          for (int64_t c = cols.start; c < cols.end; ++c) acc += src[r * p.w + c];
        }
        y[(plane * oh + oy) * ow + ox] = acc / static_cast<float>(divisor);
      }
    }
  }
}

// Window o of avg_pool2d along one axis; *padded gets its size within the padded input.
Window pool_window(int64_t o, int64_t size, int64_t k, int64_t s, int64_t pad, int64_t* padded) {
  const int64_t start = o * s - pad;
  const int64_t end = start + k < size + pad ? start + k : size + pad;
  *padded = end - start;
  return Window{start > 0 ? start : 0, end < size ? end : size};
}

Window adaptive_window(int64_t o, int64_t size, int64_t out) {
  return Window{o * size / out, ((o + 1) * size + out - 1) / out};
}

}  // namespace

int64_t pool_size(int64_t size, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  const int64_t span = size + 2 * pad - k + (ceil_mode ? s - 1 : 0);
  if (span < 0) return 0;
  int64_t out = span / s + 1;
  if (ceil_mode && (out - 1) * s >= size + pad) --out;
  return out;
}

Status avg_pool2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 7));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(Planes p, planes_of(*x));
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
  if (2 * padding[0] > kernel[0] || 2 * padding[1] > kernel[1]) return unsupported(3);
  KILN_TRY(bool ceil_mode, bool_arg(args, 4));
  KILN_TRY(bool count_include_pad, bool_arg(args, 5));
  int64_t divisor_override = 0;
  if (!is_null(args, 6)) {
    KILN_TRY(divisor_override, int_arg(args, 6));
    if (divisor_override == 0 || divisor_override < -kMaxParam * kMaxParam ||
        divisor_override > kMaxParam * kMaxParam) {
      return unsupported(6);
    }
  }
  const int64_t oh = pool_size(p.h, kernel[0], stride[0], padding[0], ceil_mode);
  const int64_t ow = pool_size(p.w, kernel[1], stride[1], padding[1], ceil_mode);
  if (oh < 1 || ow < 1) return shape_mismatch(1);
  KILN_TRY(Tensor * out, pooled_output(args, 7, *x, oh, ow));
  average(*x, p, *out, oh, ow, [&](int64_t oy, int64_t ox, Window* rows, Window* cols, int64_t* divisor) {
    int64_t padded_h, padded_w;
    *rows = pool_window(oy, p.h, kernel[0], stride[0], padding[0], &padded_h);
    *cols = pool_window(ox, p.w, kernel[1], stride[1], padding[1], &padded_w);
    if (divisor_override != 0)
      *divisor = divisor_override;
    else if (count_include_pad)
      *divisor = padded_h * padded_w;
    else
      *divisor = (rows->end - rows->start) * (cols->end - cols->start);
  });
  return {};
}

Status adaptive_avg_pool2d_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(Planes p, planes_of(*x));
  int64_t size[2];
  KILN_CHECK(pair_arg(args, 1, 1, kMaxParam, size));
  KILN_TRY(Tensor * out, pooled_output(args, 2, *x, size[0], size[1]));
  average(*x, p, *out, size[0], size[1], [&](int64_t oy, int64_t ox, Window* rows, Window* cols, int64_t* divisor) {
    *rows = adaptive_window(oy, p.h, size[0]);
    *cols = adaptive_window(ox, p.w, size[1]);
    *divisor = (rows->end - rows->start) * (cols->end - cols->start);
  });
  return {};
}

}  // namespace kiln::runtime::kernels
