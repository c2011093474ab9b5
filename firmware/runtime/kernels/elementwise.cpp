// Float32 elementwise kernels, each (self[, ...], out) with out's sizes checked:
//   aten::relu.out        max(x, 0) as numpy's maximum: NaN stays, -0 becomes +0
//   aten::hardtanh.out    clip(x, float(min_val), float(max_val)), NaN stays
//   aten::sigmoid.out     1 / (1 + exp(-x))
//   aten::tanh.out, aten::exp.out, aten::log.out   libm's tanhf/expf/logf
//   aten::reciprocal.out  1 / x
//   aten::add.out / aten::sub.out (self, other, alpha = 1) and aten::mul.out
//   (self, other): numpy broadcasting; a scalar operand (Int or Double) is float32.
// exp/log/tanh (and sigmoid's exp) are evaluated in double and rounded to float32
// (transcendental.h), the correctly rounded value in practice; numpy's
// vectorised float32 versions, which kiln.program.kernels uses, can differ by an ULP or two.
#include <cmath>

#include "transcendental.h"

#include "../src/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {

template <typename F>
Status unary(KernelArgs& args, size_t arity, F f) {
  KILN_CHECK(expect_arity(args, arity));
  KILN_TRY(const Tensor* in, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(Tensor* out, same_shape_output(args, arity, *in));
  const float* x = f32(*in);
  float* y = f32(*out);
  for (uint32_t i = 0; i < in->numel; ++i) y[i] = f(x[i]);
  return {};
}

// One operand of a broadcasting binary op: a float32 tensor or a scalar.
struct Operand {
  const float* data;
  float scalar;
  size_t dim;
  const int32_t* sizes;
};

Result<Operand> operand(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind == ValueKind::kDouble || v.kind == ValueKind::kInt) {
    KILN_TRY(double d, number_arg(args, i));
    return Operand{nullptr, static_cast<float>(d), 0, nullptr};
  }
  KILN_TRY(const Tensor* t, input_tensor(args, i, ScalarType::kFloat));
  return Operand{f32(*t), 0.0f, t->dim, t->sizes};
}

// The operand's size along output dimension d of `dim` (1 where it has fewer dims).
int32_t size_at(const Operand& o, size_t d, size_t dim) {
  size_t lead = dim - o.dim;
  return d < lead ? 1 : o.sizes[d - lead];
}

// Element strides of `o` along the output's dims (0 where it broadcasts).
void strides_of(const Operand& o, const int32_t* out_sizes, size_t dim, uint32_t* strides) {
  uint32_t stride = 1;
  for (size_t d = dim; d-- > 0;) {
    int32_t size = size_at(o, d, dim);
    strides[d] = (size == 1 && out_sizes[d] != 1) ? 0 : stride;
    stride *= static_cast<uint32_t>(size);
  }
}

template <typename F>
Status binary(KernelArgs& args, size_t arity, F f) {
  KILN_CHECK(expect_arity(args, arity));
  KILN_TRY(Operand a, operand(args, 0));
  KILN_TRY(Operand b, operand(args, 1));
  KILN_TRY(Tensor* out, output_tensor(args, arity, ScalarType::kFloat));
  size_t dim = out->dim;
  if (a.dim > dim || b.dim > dim) return shape_mismatch(arity);
  for (size_t d = 0; d < dim; ++d) {
    int32_t sa = size_at(a, d, dim), sb = size_at(b, d, dim), so = out->sizes[d];
    if ((sa != so && sa != 1) || (sb != so && sb != 1) || (sa != so && sb != so)) {
      return shape_mismatch(arity, static_cast<uint32_t>(d));
    }
  }
  uint32_t stride_a[kMaxDims], stride_b[kMaxDims], index[kMaxDims] = {};
  strides_of(a, out->sizes, dim, stride_a);
  strides_of(b, out->sizes, dim, stride_b);
  float* y = f32(*out);
  uint32_t ia = 0, ib = 0;
  for (uint32_t i = 0; i < out->numel; ++i) {
    y[i] = f(a.data ? a.data[ia] : a.scalar, b.data ? b.data[ib] : b.scalar);
    // Advance the output index (row-major) and the operands' offsets with it.
    for (size_t d = dim; d-- > 0;) {
      ia += stride_a[d];
      ib += stride_b[d];
      if (++index[d] < static_cast<uint32_t>(out->sizes[d])) break;
      ia -= stride_a[d] * index[d];
      ib -= stride_b[d] * index[d];
      index[d] = 0;
    }
  }
  return {};
}

Status check_alpha(const KernelArgs& args) {
  if (is_null(args, 2)) return {};
  KILN_TRY(double alpha, number_arg(args, 2));
  if (alpha != 1.0) return unsupported(2);
  return {};
}

}  // namespace

Status relu_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return (x > 0.0f || x != x) ? x : 0.0f; });
}

Status hardtanh_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(double lo_arg, number_arg(args, 1));
  KILN_TRY(double hi_arg, number_arg(args, 2));
  const float lo = static_cast<float>(lo_arg), hi = static_cast<float>(hi_arg);
  return unary(args, 3, [lo, hi](float x) {
    float v = (x != x || x > lo) ? x : lo;
    return (v != v || v < hi) ? v : hi;
  });
}

Status sigmoid_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return 1.0f / (1.0f + kiln_expf(-x)); });
}

Status tanh_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return kiln_tanhf(x); });
}

Status exp_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return kiln_expf(x); });
}

Status log_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return kiln_logf(x); });
}

Status reciprocal_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return 1.0f / x; });
}

Status add_out(KernelArgs& args) {
  if (args.size() != 5) return bad_argument(args.size(), 5);
  KILN_CHECK(check_alpha(args));
  return binary(args, 3, [](float a, float b) { return a + b; });
}

Status sub_out(KernelArgs& args) {
  if (args.size() != 5) return bad_argument(args.size(), 5);
  KILN_CHECK(check_alpha(args));
  return binary(args, 3, [](float a, float b) { return a - b; });
}

Status mul_out(KernelArgs& args) {
  return binary(args, 2, [](float a, float b) { return a * b; });
}

}  // namespace kiln::runtime::kernels
