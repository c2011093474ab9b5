// aten::upsample_bilinear2d.vec_out (input, output_size, align_corners,
// scale_factors, out), NCHW float32, as kiln.program.kernels computes it:
//   source index per output index o (float32 arithmetic):
//     align_corners: o * float((in - 1) / (out - 1))   (0 when out == 1)
//     otherwise:     max((o + 0.5) * ratio - 0.5, 0), ratio = float(1 / scale) when a
//                    scale factor is given, else float(in / out)  (ratios in double)
//   i0 = min(trunc(src), in - 1), i1 = min(i0 + 1, in - 1), l1 = src - i0, l0 = 1 - l1
//   out = l0y * (x[y0,x0] * l0x + x[y0,x1] * l1x) + l1y * (x[y1,x0] * l0x + x[y1,x1] * l1x)
#include "kiln/runtime/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxSize = 1 << 16;

struct Source {
  int32_t i0, i1;
  float l0, l1;
};

Source source_index(int64_t o, int64_t out_size, int64_t in_size, double scale, bool align_corners) {
  float src;
  if (align_corners) {
    float ratio =
        out_size > 1 ? static_cast<float>(static_cast<double>(in_size - 1) / static_cast<double>(out_size - 1)) : 0.0f;
    src = static_cast<float>(o) * ratio;
  } else {
    float ratio = scale != 0.0 ? static_cast<float>(1.0 / scale)
                               : static_cast<float>(static_cast<double>(in_size) / static_cast<double>(out_size));
    src = (static_cast<float>(o) + 0.5f) * ratio - 0.5f;
    src = src > 0.0f ? src : 0.0f;
  }
  int64_t i0 = static_cast<int64_t>(src);
  if (i0 > in_size - 1) i0 = in_size - 1;
  int64_t i1 = i0 + 1 > in_size - 1 ? in_size - 1 : i0 + 1;
  float l1 = src - static_cast<float>(i0);
  return Source{static_cast<int32_t>(i0), static_cast<int32_t>(i1), 1.0f - l1, l1};
}

double double_item(const Value& list, size_t j) { return static_cast<const double*>(list.list.items)[j]; }

}  // namespace

Status upsample_bilinear2d_vec_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 4));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  if (x->dim != 4) return unsupported(0, x->dim);
  const int64_t n = x->sizes[0], c = x->sizes[1], h = x->sizes[2], w = x->sizes[3];
  KILN_TRY(bool align_corners, bool_arg(args, 2));
  int64_t oh, ow;
  double sy = 0.0, sx = 0.0;
  if (!is_null(args, 1)) {
    int64_t size[2];
    size_t count = 0;
    KILN_CHECK(int_list_arg(args, 1, size, 2, &count));
    if (count != 2) return unsupported(1);
    oh = size[0], ow = size[1];
  } else {
    const Value& scales = args[3];
    if (scales.kind != ValueKind::kDoubleList || scales.list.count != 2) return bad_argument(3);
    sy = double_item(scales, 0), sx = double_item(scales, 1);
    if (!(sy > 0.0 && sy < kMaxSize && sx > 0.0 && sx < kMaxSize)) return unsupported(3);
    oh = static_cast<int64_t>(static_cast<double>(h) * sy);
    ow = static_cast<int64_t>(static_cast<double>(w) * sx);
  }
  if (oh < 1 || ow < 1 || oh > kMaxSize || ow > kMaxSize || h < 1 || w < 1) return unsupported(1);
  KILN_TRY(Tensor * out, output_tensor(args, 4, ScalarType::kFloat));
  const int64_t sizes[4] = {n, c, oh, ow};
  KILN_CHECK(expect_sizes(*out, sizes, 4, 4));
  KILN_TRY(const int64_t planes, checked_mul(n, c, 0));
  const float* in = f32(*x);
  float* y = f32(*out);
  for (int64_t plane = 0; plane < planes; ++plane) {
    const float* p = in + plane * h * w;
    for (int64_t oy = 0; oy < oh; ++oy) {
      Source sy_ = source_index(oy, oh, h, sy, align_corners);
      for (int64_t ox = 0; ox < ow; ++ox) {
        Source sx_ = source_index(ox, ow, w, sx, align_corners);
        float top = p[sy_.i0 * w + sx_.i0] * sx_.l0 + p[sy_.i0 * w + sx_.i1] * sx_.l1;
        float bottom = p[sy_.i1 * w + sx_.i0] * sx_.l0 + p[sy_.i1 * w + sx_.i1] * sx_.l1;
        y[(plane * oh + oy) * ow + ox] = sy_.l0 * top + sy_.l1 * bottom;
      }
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
