// Reductions over float32, as kiln.program.kernels:
//   aten::amax.out (self, dim, keepdim, out): the maximum over `dim` (NaN wins).
//   aten::sum.IntList_out (self, dim = [one], keepdim, dtype = None, out): 0 plus the
//     values along the dimension in index order.
//   aten::_softmax.out / aten::_log_softmax.out (self, dim, half_to_float = false,
//     out): shifted = x - max; e = exp(shifted); total = 0 + e in index order;
//     softmax = e / total, log_softmax = shifted - log(total). exp/log as transcendental.h.
#include <cmath>

#include "transcendental.h"

#include "../src/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {

// A tensor seen as [outer, n, inner] around one dimension.
struct Around {
  uint32_t outer = 1, n = 1, inner = 1;
};

Around around(const Tensor& t, size_t dim) {
  Around a;
  for (size_t d = 0; d < t.dim; ++d) {
    auto size = static_cast<uint32_t>(t.sizes[d]);
    if (d < dim) a.outer *= size;
    else if (d == dim) a.n = size;
    else a.inner *= size;
  }
  return a;
}

// The sizes of `x` reduced over the dims in `mask`: kept as 1 or dropped.
size_t reduced_sizes(const Tensor& x, uint32_t mask, bool keepdim, int64_t* sizes) {
  size_t dim = 0;
  for (size_t d = 0; d < x.dim; ++d) {
    if (mask & (1u << d)) {
      if (keepdim) sizes[dim++] = 1;
    } else {
      sizes[dim++] = x.sizes[d];
    }
  }
  return dim;
}

float max_of(float acc, float v) { return (acc != acc || v != v) ? (acc != acc ? acc : v) : (v > acc ? v : acc); }

Status softmax(KernelArgs& args, bool log) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  KILN_TRY(size_t dim, dim_index(dim_arg, x->dim, 1));
  KILN_TRY(bool half_to_float, bool_arg(args, 2));
  if (half_to_float) return unsupported(2);
  KILN_TRY(Tensor* out, same_shape_output(args, 3, *x));
  Around a = around(*x, dim);
  if (a.n == 0) return {};
  const float* in = f32(*x);
  float* y = f32(*out);
  for (uint32_t o = 0; o < a.outer; ++o) {
    for (uint32_t k = 0; k < a.inner; ++k) {
      const uint32_t base = o * a.n * a.inner + k;
      float max = in[base];
      for (uint32_t i = 1; i < a.n; ++i) max = max_of(max, in[base + i * a.inner]);
      float total = 0.0f;
      for (uint32_t i = 0; i < a.n; ++i) total += kiln_expf(in[base + i * a.inner] - max);
      const float log_total = log ? kiln_logf(total) : 0.0f;
      for (uint32_t i = 0; i < a.n; ++i) {
        float shifted = in[base + i * a.inner] - max;
        y[base + i * a.inner] = log ? shifted - log_total : kiln_expf(shifted) / total;
      }
    }
  }
  return {};
}

}  // namespace

Status amax_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  int64_t dims[kMaxDims];
  size_t n_dims = 0;
  KILN_CHECK(int_list_arg(args, 1, dims, kMaxDims, &n_dims));
  uint32_t mask = 0;
  for (size_t j = 0; j < n_dims; ++j) {
    KILN_TRY(size_t d, dim_index(dims[j], x->dim, 1));
    mask |= 1u << d;
  }
  if (n_dims == 0) mask = (1u << x->dim) - 1;  // numpy: no axes given reduces all
  KILN_TRY(bool keepdim, bool_arg(args, 2));
  KILN_TRY(Tensor* out, output_tensor(args, 3, ScalarType::kFloat));
  int64_t sizes[kMaxDims];
  size_t out_dim = reduced_sizes(*x, mask, keepdim, sizes);
  KILN_CHECK(expect_sizes(*out, sizes, out_dim, 3));
  if (x->numel == 0) return unsupported(0);
  const float* in = f32(*x);
  float* y = f32(*out);
  for (uint32_t i = 0; i < out->numel; ++i) y[i] = -INFINITY;
  uint32_t index[kMaxDims] = {};
  for (uint32_t i = 0; i < x->numel; ++i) {
    uint32_t o = 0;
    for (size_t d = 0; d < x->dim; ++d) {
      if (!(mask & (1u << d))) o = o * static_cast<uint32_t>(x->sizes[d]) + index[d];
    }
    y[o] = max_of(y[o], in[i]);
    for (size_t d = x->dim; d-- > 0;) {
      if (++index[d] < static_cast<uint32_t>(x->sizes[d])) break;
      index[d] = 0;
    }
  }
  return {};
}

Status sum_intlist_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 4));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kFloat));
  int64_t dims[1];
  size_t n_dims = 0;
  KILN_CHECK(int_list_arg(args, 1, dims, 1, &n_dims));
  if (n_dims != 1) return unsupported(1);
  KILN_TRY(size_t dim, dim_index(dims[0], x->dim, 1));
  KILN_TRY(bool keepdim, bool_arg(args, 2));
  if (!is_null(args, 3)) return unsupported(3);
  KILN_TRY(Tensor* out, output_tensor(args, 4, ScalarType::kFloat));
  int64_t sizes[kMaxDims];
  size_t out_dim = reduced_sizes(*x, 1u << dim, keepdim, sizes);
  KILN_CHECK(expect_sizes(*out, sizes, out_dim, 4));
  Around a = around(*x, dim);
  const float* in = f32(*x);
  float* y = f32(*out);
  for (uint32_t o = 0; o < a.outer; ++o) {
    for (uint32_t k = 0; k < a.inner; ++k) {
      float acc = 0.0f;
      for (uint32_t i = 0; i < a.n; ++i) acc += in[(o * a.n + i) * a.inner + k];
      y[o * a.inner + k] = acc;
    }
  }
  return {};
}

Status softmax_out(KernelArgs& args) { return softmax(args, false); }
Status log_softmax_out(KernelArgs& args) { return softmax(args, true); }

}  // namespace kiln::runtime::kernels
