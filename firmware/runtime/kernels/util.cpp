#include "util.h"

#include "kiln/runtime/try.h"

namespace kiln::runtime::kernels {

Error bad_argument(size_t position, uint32_t detail) {
  return Error{ErrorCode::kKernelBadArgument, static_cast<uint32_t>(position), detail};
}
Error shape_mismatch(size_t position, uint32_t detail) {
  return Error{ErrorCode::kKernelShapeMismatch, static_cast<uint32_t>(position), detail};
}
Error unsupported(size_t position, uint32_t detail) {
  return Error{ErrorCode::kKernelUnsupported, static_cast<uint32_t>(position), detail};
}

Status expect_arity(const KernelArgs& args, size_t n) {
  if (args.size() != n + 2) return bad_argument(args.size(), static_cast<uint32_t>(n + 2));
  if (&args[n] != &args[n + 1]) return bad_argument(n + 1);
  return {};
}

static Result<Tensor*> tensor_arg(const KernelArgs& args, size_t i, ScalarType type, bool any_order) {
  Value& v = args[i];
  if (v.kind != ValueKind::kTensor) return bad_argument(i, static_cast<uint32_t>(v.kind));
  if (v.t.type != type) return bad_argument(i, 0x100u + static_cast<uint32_t>(v.t.type));
  if (v.t.data == nullptr && v.t.nbytes != 0) return bad_argument(i, 0x200);
  if (!any_order && v.t.order != DimOrder::kContiguous) return unsupported(i, kChannelsLastDetail);
  return &v.t;
}

static Result<Tensor*> out_arg(const KernelArgs& args, size_t n, ScalarType type, bool any_order) {
  KILN_TRY(Tensor * t, tensor_arg(args, n, type, any_order));
  if (t->constant) return bad_argument(n, 0x300);
  return t;
}

Result<const Tensor*> input_tensor(const KernelArgs& args, size_t i, ScalarType type) {
  KILN_TRY(Tensor * t, tensor_arg(args, i, type, false));
  return static_cast<const Tensor*>(t);
}

Result<Tensor*> output_tensor(const KernelArgs& args, size_t n, ScalarType type) {
  return out_arg(args, n, type, false);
}

Result<const Tensor*> input_tensor_any_order(const KernelArgs& args, size_t i, ScalarType type) {
  KILN_TRY(Tensor * t, tensor_arg(args, i, type, true));
  return static_cast<const Tensor*>(t);
}

Result<Tensor*> output_tensor_any_order(const KernelArgs& args, size_t n, ScalarType type) {
  return out_arg(args, n, type, true);
}

Status same_order(const Tensor& a, const Tensor& b, size_t position) {
  if (a.order != b.order) return unsupported(position, kChannelsLastDetail);
  return {};
}

void nchw_steps(const Tensor& t, int64_t steps[4]) {
  if (t.numel == 0) {  // no element to step to, and its sizes' product may pass int64
    steps[0] = steps[1] = steps[2] = steps[3] = 0;
    return;
  }
  const int64_t c = t.sizes[1], h = t.sizes[2], w = t.sizes[3];
  steps[0] = c * h * w;
  if (t.order == DimOrder::kChannelsLast) {
    steps[1] = 1, steps[2] = w * c, steps[3] = c;
  } else {
    steps[1] = h * w, steps[2] = w, steps[3] = 1;
  }
}

Result<double> number_arg(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind == ValueKind::kDouble) return v.d;
  if (v.kind == ValueKind::kInt) return static_cast<double>(v.i);
  return bad_argument(i, static_cast<uint32_t>(v.kind));
}

Result<int64_t> int_arg(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind != ValueKind::kInt) return bad_argument(i, static_cast<uint32_t>(v.kind));
  return v.i;
}

Result<bool> bool_arg(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind != ValueKind::kBool) return bad_argument(i, static_cast<uint32_t>(v.kind));
  return v.b;
}

bool is_null(const KernelArgs& args, size_t i) { return args[i].kind == ValueKind::kNull; }

Status int_list_arg(const KernelArgs& args, size_t i, int64_t* out, size_t max, size_t* count) {
  const Value& v = args[i];
  if (v.kind != ValueKind::kIntList) return bad_argument(i, static_cast<uint32_t>(v.kind));
  if (v.list.count > max) return unsupported(i, v.list.count);
  for (size_t j = 0; j < v.list.count; ++j) out[j] = args.int_item(v, j);
  *count = v.list.count;
  return {};
}

Status pair_arg(const KernelArgs& args, size_t i, int64_t lo, int64_t hi, int64_t pair[2]) {
  size_t count = 0;
  KILN_CHECK(int_list_arg(args, i, pair, 2, &count));
  if (count == 0) return unsupported(i, 0);
  if (count == 1) pair[1] = pair[0];
  for (size_t j = 0; j < 2; ++j) {
    if (pair[j] < lo || pair[j] > hi) return unsupported(i, static_cast<uint32_t>(pair[j]));
  }
  return {};
}

bool same_sizes(const Tensor& a, const Tensor& b) {
  if (a.dim != b.dim) return false;
  for (size_t d = 0; d < a.dim; ++d) {
    if (a.sizes[d] != b.sizes[d]) return false;
  }
  return true;
}

Status expect_sizes(const Tensor& t, const int64_t* sizes, size_t dim, size_t position) {
  if (t.dim != dim) return shape_mismatch(position, t.dim);
  for (size_t d = 0; d < dim; ++d) {
    if (t.sizes[d] != sizes[d]) return shape_mismatch(position, static_cast<uint32_t>(d));
  }
  return {};
}

Result<Tensor*> same_shape_output(const KernelArgs& args, size_t n, const Tensor& like) {
  KILN_TRY(Tensor * out, output_tensor(args, n, ScalarType::kFloat));
  if (!same_sizes(*out, like)) return shape_mismatch(n);
  return out;
}

Result<size_t> dim_index(int64_t d, size_t dim, size_t position) {
  int64_t n = static_cast<int64_t>(dim);
  if (d < -n || d >= n) return unsupported(position, static_cast<uint32_t>(d));
  return static_cast<size_t>(d < 0 ? d + n : d);
}

Result<int64_t> checked_add(int64_t a, int64_t b, size_t position) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return unsupported(position);
  return sum;
}

Result<int64_t> checked_mul(int64_t a, int64_t b, size_t position) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) return unsupported(position);
  return product;
}

Result<int64_t> size_product(const Tensor& t, size_t from, size_t to, size_t position) {
  int64_t product = 1;
  for (size_t d = from; d < to && d < t.dim; ++d) {
    KILN_TRY(product, checked_mul(product, t.sizes[d], position));
  }
  return product;
}

}  // namespace kiln::runtime::kernels
