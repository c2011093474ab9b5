// Matrix products over float32, as kiln.program.kernels.nn:
//   aten::matmul.out (self, other, out): PyTorch's matmul. A 1-D self is a row [1, k] and a
//     1-D other a column [k, 1], and the output drops that dim again; the batch dims (all
//     but the last two) broadcast as numpy's.
//   aten::mm.out (self, mat2, out): [n, k] x [k, m].
//   aten::bmm.out (self, mat2, out): [b, n, k] x [b, k, m], the same b.
// Each output starts at 0 and adds a[.., i, kk] * b[.., kk, j] for kk = 0, 1, ... in float32.
#include "kiln/runtime/try.h"
#include "util.h"
#include "walk.h"

namespace kiln::runtime::kernels {

namespace {

// Checks the operands and out (position 2) and multiplies.
Status multiply(const KernelArgs& args, const Tensor& a, const Tensor& b) {
  if (a.dim < 1) return unsupported(0, a.dim);
  if (b.dim < 1) return unsupported(1, b.dim);
  const size_t a_batch = a.dim >= 2 ? a.dim - 2 : 0, b_batch = b.dim >= 2 ? b.dim - 2 : 0;
  const int64_t n = a.dim >= 2 ? a.sizes[a.dim - 2] : 1, k = a.sizes[a.dim - 1];
  const int64_t m = b.dim >= 2 ? b.sizes[b.dim - 1] : 1, b_k = b.sizes[b.dim >= 2 ? b.dim - 2 : 0];
  if (b_k != k) return shape_mismatch(1, static_cast<uint32_t>(b_k));
  // Batch dims aligned at the right; strides in elements (0 where an operand broadcasts).
  const size_t batch = a_batch > b_batch ? a_batch : b_batch;
  int64_t sizes[kMaxDims];
  size_t out_dim = 0;
  KILN_TRY(const int64_t a_matrix, checked_mul(n, k, 0));
  KILN_TRY(const int64_t b_matrix, checked_mul(k, m, 1));
  // uint32 strides wrap only when an operand has no elements: unused then
  uint32_t a_stride = static_cast<uint32_t>(a_matrix), b_stride = static_cast<uint32_t>(b_matrix);
  uint32_t strides[2][kMaxDims];
  for (size_t i = batch; i-- > 0;) {  // innermost batch dim first
    const size_t from_end = batch - 1 - i;
    const int64_t sa = from_end < a_batch ? a.sizes[a_batch - 1 - from_end] : 1;
    const int64_t sb = from_end < b_batch ? b.sizes[b_batch - 1 - from_end] : 1;
    if (sa != sb && sa != 1 && sb != 1) return shape_mismatch(1, static_cast<uint32_t>(i));
    sizes[i] = sa == 1 ? sb : sa;
    strides[0][i] = sa == 1 ? 0 : a_stride;
    strides[1][i] = sb == 1 ? 0 : b_stride;
    a_stride *= static_cast<uint32_t>(sa);  // wraps only when a has no elements: unused then
    b_stride *= static_cast<uint32_t>(sb);
  }
  out_dim = batch;
  if (a.dim >= 2) sizes[out_dim++] = n;
  if (b.dim >= 2) sizes[out_dim++] = m;
  KILN_TRY(Tensor * out, output_tensor(args, 2, ScalarType::kFloat));
  KILN_CHECK(expect_sizes(*out, sizes, out_dim, 2));
  if (out->numel == 0) return {};
  // out has elements, so n, m and every batch size are positive and out's products fit
  // uint32; with k > 0 so do a's and b's.
  Walk<2> walk;
  for (size_t i = 0; i < batch; ++i) walk.add(static_cast<uint32_t>(sizes[i]), {strides[0][i], strides[1][i]});
  const uint32_t rows = static_cast<uint32_t>(n), cols = static_cast<uint32_t>(m), inner = static_cast<uint32_t>(k);
  const uint32_t matrices = out->numel / (rows * cols);
  const float* pa = f32(a);
  const float* pb = f32(b);
  float* y = f32(*out);
  for (uint32_t t = 0; t < matrices; ++t, walk.next()) {
    const float* ma = pa + walk.offset(0);
    const float* mb = pb + walk.offset(1);
    float* my = y + t * rows * cols;
    for (uint32_t i = 0; i < rows; ++i) {
      for (uint32_t j = 0; j < cols; ++j) {
        float acc = 0.0f;
        for (uint32_t kk = 0; kk < inner; ++kk) acc += ma[i * inner + kk] * mb[kk * cols + j];
        my[i * cols + j] = acc;
      }
    }
  }
  return {};
}

// mm and bmm: both operands of `rank`, bmm's batch sizes equal.
Status fixed_rank(KernelArgs& args, size_t rank) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(const Tensor* a, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(const Tensor* b, input_tensor(args, 1, ScalarType::kFloat));
  if (a->dim != rank) return shape_mismatch(0, a->dim);
  if (b->dim != rank) return shape_mismatch(1, b->dim);
  if (rank == 3 && a->sizes[0] != b->sizes[0]) return shape_mismatch(1, 0);
  return multiply(args, *a, *b);
}

}  // namespace

Status matmul_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(const Tensor* a, input_tensor(args, 0, ScalarType::kFloat));
  KILN_TRY(const Tensor* b, input_tensor(args, 1, ScalarType::kFloat));
  return multiply(args, *a, *b);
}

Status mm_out(KernelArgs& args) { return fixed_rank(args, 2); }
Status bmm_out(KernelArgs& args) { return fixed_rank(args, 3); }

}  // namespace kiln::runtime::kernels
