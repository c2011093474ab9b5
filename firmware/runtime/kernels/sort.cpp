// Sorting along a dim: ops with two outputs (semantics: compiler/kiln/program/kernels/sort.py).
//   aten::sort.values (self, dim, descending, values, indices, values, indices)
//   aten::topk.values (self, k, dim, largest, sorted, values, indices, values, indices)
// A call lists the schema's arguments, the two out tensors, then the returned value: one
// TensorList of the two (ExecuTorch's emitter returns several out arguments so). self is float32, int32 or
// int64; values has its type, indices is int64; both have self's sizes with dim's size k (n for
// sort). The order is stable: ascending puts a NaN after every number, descending before; equal
// values (-0.0 and 0.0, two NaNs) keep index order. topk is the first k of that order
// (descending when largest); sorted = false gets the sorted order too.
// Heap-free, in place in the out tensors: each slice along dim is scanned in index order and
// each element inserted into the kept list (at most k long) after every element not strictly
// behind it, shifting the ones behind it; work per slice is O(n k) <= O(n^2) comparisons and
// moves, n = the size of dim. Offsets are uint32: numel is bounded by the loader.
#include "kiln/runtime/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {

// Whether a comes strictly before b in the order (ascending: smaller first, NaN last).
template <typename T>
bool before(T a, T b, bool descending) {
  if (descending) return a > b || (a != a && b == b);
  return a < b || (a == a && b != b);
}

template <typename T>
void select(const Tensor& x, size_t dim, uint32_t k, bool descending, Tensor& values, Tensor& indices) {
  uint32_t outer = 1, inner = 1;
  for (size_t d = 0; d < dim; ++d) outer *= static_cast<uint32_t>(x.sizes[d]);
  for (size_t d = dim + 1; d < x.dim; ++d) inner *= static_cast<uint32_t>(x.sizes[d]);
  const uint32_t n = x.dim > 0 ? static_cast<uint32_t>(x.sizes[dim]) : 1;
  const T* in = static_cast<const T*>(x.data);
  T* v = static_cast<T*>(values.data);
  auto* ix = static_cast<int64_t*>(indices.data);
  for (uint32_t o = 0; o < outer; ++o) {
    for (uint32_t j = 0; j < inner; ++j) {
      const T* src = in + o * n * inner + j;
      T* vs = v + o * k * inner + j;
      int64_t* is = ix + o * k * inner + j;
      uint32_t kept = 0;
      for (uint32_t i = 0; i < n; ++i) {
        const T a = src[i * inner];
        uint32_t p = kept;  // after every kept element `a` is not strictly before
        while (p > 0 && before(a, vs[(p - 1) * inner], descending)) --p;
        if (p >= k) continue;  // behind the k kept ones
        for (uint32_t q = kept < k ? kept : k - 1; q > p; --q) {
          vs[q * inner] = vs[(q - 1) * inner];
          is[q * inner] = is[(q - 1) * inner];
        }
        vs[p * inner] = a;
        is[p * inner] = i;
        if (kept < k) ++kept;
      }
    }
  }
}

// self at 0, the schema's other arguments up to n, then values, indices, [values, indices].
Status sort_or_topk(KernelArgs& args, size_t n, bool topk) {
  if (args.size() != n + 3) return bad_argument(args.size(), static_cast<uint32_t>(n + 3));
  const Value& result = args[n + 2];
  if (result.kind != ValueKind::kTensorList || result.list.count != 2) return bad_argument(n + 2);
  for (size_t j = 0; j < 2; ++j) {
    if (args[n + j].kind != ValueKind::kTensor || &args.tensor_item(result, j) != &args[n + j].t) {
      return bad_argument(n + 2, static_cast<uint32_t>(j + 1));
    }
  }
  const Value& v = args[0];
  if (v.kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(v.kind));
  const ScalarType type = v.t.type;
  if (type != ScalarType::kFloat && type != ScalarType::kInt && type != ScalarType::kLong) {
    return unsupported(0, static_cast<uint32_t>(type));
  }
  KILN_TRY(const Tensor* x, input_tensor(args, 0, type));
  int64_t k = -1;
  if (topk) {
    KILN_TRY(int64_t k_arg, int_arg(args, 1));
    k = k_arg;
  }
  KILN_TRY(int64_t dim_arg, int_arg(args, topk ? 2 : 1));
  KILN_TRY(size_t dim, dim_index(dim_arg, x->dim > 0 ? x->dim : 1, topk ? 2 : 1));
  KILN_TRY(bool descending, bool_arg(args, topk ? 3 : 2));
  if (topk) {  // any value: the sorted order is one sorted = false permits
    KILN_TRY(bool sorted, bool_arg(args, 4));
    static_cast<void>(sorted);
  }
  const int64_t size = x->dim > 0 ? x->sizes[dim] : 1;
  if (!topk) k = size;
  if (k < 0 || k > size) return unsupported(1, static_cast<uint32_t>(k));
  KILN_TRY(Tensor * values, output_tensor(args, n, type));
  KILN_TRY(Tensor * indices, output_tensor(args, n + 1, ScalarType::kLong));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d < x->dim; ++d) sizes[d] = d == dim ? k : x->sizes[d];
  KILN_CHECK(expect_sizes(*values, sizes, x->dim, n));
  KILN_CHECK(expect_sizes(*indices, sizes, x->dim, n + 1));
  if (x->numel == 0 || k == 0) return {};
  const auto kk = static_cast<uint32_t>(k);
  switch (type) {
    case ScalarType::kFloat: select<float>(*x, dim, kk, descending, *values, *indices); break;
    case ScalarType::kInt: select<int32_t>(*x, dim, kk, descending, *values, *indices); break;
    default: select<int64_t>(*x, dim, kk, descending, *values, *indices); break;
  }
  return {};
}

}  // namespace

Status sort_values(KernelArgs& args) { return sort_or_topk(args, 3, false); }
Status topk_values(KernelArgs& args) { return sort_or_topk(args, 5, true); }

}  // namespace kiln::runtime::kernels
