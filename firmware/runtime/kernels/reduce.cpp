// Reductions, cumulative sums and softmax, as kiln.program.kernels.reduce:
//   aten::sum.IntList_out (self, dim, keepdim, dtype, out) and aten::mean.out (same):
//     float32; each output starts at +0.0 and adds its inputs one at a time in row-major
//     order of the reduced dims; mean then divides once by float(count). sum also takes
//     integers and bool to int64 (dtype None or int64), wrapping modulo 2^64.
//   aten::amax.out / aten::amin.out (self, dim, keepdim, out): float32, integers or bool, out
//     of the same type; the first extreme value in that order, a NaN more extreme than any number.
//   aten::argmax.out / aten::argmin.out (self, dim (int or None), keepdim, out): float32 or
//     integer input, int64 out; the index (along dim, or flat for None) of that first extreme.
//   aten::any.dims_out / aten::all.dims_out (self, dim, keepdim, out): bool to bool over a
//     non-empty dim list; whether some / every value is true (any of none: false, all: true).
//   aten::cumsum.out (self, dim, dtype, out): out[i] = out[i - 1] + x[i] from +0.0; float32
//     to float32, integers and bool to int64 (wrapping modulo 2^64).
//   aten::_softmax.out / aten::_log_softmax.out (self, dim, half_to_float = false, out):
//     shifted = x - max; e = exp(shifted); total = 0 + e in index order;
//     softmax = e / total, log_softmax = shifted - log(total). exp/log as transcendental.h.
//     self and out each in its own DimOrder (ExecuTorch's Cortex-M flow leaves a float softmax
//     of a channels-last tensor).
// Dims: negative ones count from the end; a dim list that is None or [] means every dim; a
// dim named twice is unsupported; reducing an empty dim to an extreme value is unsupported.
// Offsets are uint32: every reduction reads only when the input has elements, and then each
// product of its sizes is at most numel, which the loader bounds to uint32.
#include "transcendental.h"

#include "kiln/runtime/try.h"
#include "util.h"
#include "walk.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kFloatCode = 6;  // ScalarType codes of a dtype argument
constexpr int64_t kLongCode = 4;
constexpr uint64_t kBeyond = uint64_t{1} << 32;  // saturation of size products

// An input seen as kept dims (the outputs, in row-major order) and reduced dims (each
// output's inputs, in row-major order), with their contiguous strides; outputs and count
// are the products of their sizes (saturated).
struct Reduction {
  Walk<1> kept, reduced;
  uint64_t outputs = 1, count = 1;
};

Reduction split(const Tensor& x, uint32_t mask) {
  uint32_t strides[kMaxDims];
  uint32_t stride = 1;
  for (size_t d = x.dim; d-- > 0;) {  // strides wrap only when numel == 0, and are unused then
    strides[d] = stride;
    stride *= static_cast<uint32_t>(x.sizes[d]);
  }
  Reduction r;
  for (size_t d = 0; d < x.dim; ++d) {
    const auto size = static_cast<uint32_t>(x.sizes[d]);
    const bool reduced = mask & (1u << d);
    (reduced ? r.reduced : r.kept).add(size, {strides[d]});
    uint64_t& p = reduced ? r.count : r.outputs;
    p = p * size > kBeyond ? kBeyond : p * size;
  }
  return r;
}

// Calls visit(output index, the offset of its first input, a Walk over its inputs) for
// each output in order (r.outputs is the out tensor's numel, checked by the caller).
// Offsets are meaningful only when r.count > 0; callers read nothing otherwise.
template <typename Visit>
void for_each_output(const Reduction& r, Visit visit) {
  Walk<1> outer = r.kept;
  for (uint32_t o = 0; o < r.outputs; ++o, outer.next()) visit(o, outer.offset(), r.reduced);
}

// The dims argument `i` of a reduction over `x` as a bit mask: an IntList (empty: every
// dim) or, when `optional`, None (every dim). A 0-d tensor takes dim 0 and -1.
Result<uint32_t> dim_mask(const KernelArgs& args, size_t i, const Tensor& x, bool optional) {
  const uint32_t all = (1u << x.dim) - 1;
  if (optional && is_null(args, i)) return all;
  int64_t dims[kMaxDims];
  size_t n = 0;
  KILN_CHECK(int_list_arg(args, i, dims, kMaxDims, &n));
  if (n == 0) return all;
  uint32_t mask = 0, seen = 0;
  for (size_t j = 0; j < n; ++j) {
    KILN_TRY(size_t d, dim_index(dims[j], x.dim > 0 ? x.dim : 1, i));
    if (seen & (1u << d)) return unsupported(i, static_cast<uint32_t>(d));
    seen |= 1u << d;
    mask |= (1u << d) & all;
  }
  return mask;
}

// The out tensor (position n) of `type`, with x's sizes reduced over `mask` (kept as 1
// with keepdim, else dropped).
Result<Tensor*> reduced_output(const KernelArgs& args, size_t n, const Tensor& x, uint32_t mask, bool keepdim,
                               ScalarType type) {
  KILN_TRY(Tensor * out, output_tensor(args, n, type));
  int64_t sizes[kMaxDims];
  size_t dim = 0;
  for (size_t d = 0; d < x.dim; ++d) {
    if (!(mask & (1u << d)))
      sizes[dim++] = x.sizes[d];
    else if (keepdim)
      sizes[dim++] = 1;
  }
  KILN_CHECK(expect_sizes(*out, sizes, dim, n));
  return out;
}

// Whether v is more extreme than best: a NaN beats any number and no later value beats a
// NaN; otherwise strictly larger (smaller), so the first of equal extremes stays.
template <typename T>
bool beats(T v, T best, bool largest) {
  if (best != best) return false;
  if (v != v) return true;
  return largest ? v > best : v < best;
}

float max_of(float acc, float v) { return beats(v, acc, true) ? v : acc; }

// The type of tensor argument `i` (an error if it is not a tensor).
Result<ScalarType> tensor_type(const KernelArgs& args, size_t i) {
  if (args[i].kind != ValueKind::kTensor) return bad_argument(i, static_cast<uint32_t>(args[i].kind));
  return args[i].t.type;
}

// Sums over the reduced dims into Acc (float, or uint64_t for int64 out, wrapping), one input
// at a time in row-major order from 0; with `divide`, each divided once by the count.
template <typename Acc, typename In, typename Out>
void sums_of(const Reduction& r, const In* in, Out* y, bool divide) {
  const Acc count = static_cast<Acc>(r.count);
  for_each_output(r, [&](uint32_t o, uint32_t base, Walk<1> walk) {
    Acc acc = 0;
    for (uint64_t k = 0; k < r.count; ++k, walk.next()) acc += static_cast<Acc>(in[base + walk.offset()]);
    y[o] = static_cast<Out>(divide ? acc / count : acc);
  });
}

Status sum_or_mean(KernelArgs& args, bool mean) {
  KILN_CHECK(expect_arity(args, 4));
  KILN_TRY(const ScalarType type, tensor_type(args, 0));
  const bool floats = type == ScalarType::kFloat || mean;  // mean: float32 only
  KILN_TRY(const Tensor* x, input_tensor(args, 0, floats ? ScalarType::kFloat : type));
  KILN_TRY(uint32_t mask, dim_mask(args, 1, *x, true));
  KILN_TRY(bool keepdim, bool_arg(args, 2));
  if (!is_null(args, 3)) {
    KILN_TRY(int64_t dtype, int_arg(args, 3));
    if (dtype != (floats ? kFloatCode : kLongCode)) return unsupported(3, static_cast<uint32_t>(dtype));
  }
  KILN_TRY(Tensor * out, reduced_output(args, 4, *x, mask, keepdim, floats ? ScalarType::kFloat : ScalarType::kLong));
  const Reduction r = split(*x, mask);
  auto* y = static_cast<int64_t*>(out->data);
  switch (type) {
    case ScalarType::kFloat: sums_of<float>(r, f32(*x), f32(*out), mean); break;
    case ScalarType::kBool: sums_of<uint64_t>(r, static_cast<const uint8_t*>(x->data), y, false); break;
    case ScalarType::kChar: sums_of<uint64_t>(r, static_cast<const int8_t*>(x->data), y, false); break;
    case ScalarType::kShort: sums_of<uint64_t>(r, static_cast<const int16_t*>(x->data), y, false); break;
    case ScalarType::kInt: sums_of<uint64_t>(r, static_cast<const int32_t*>(x->data), y, false); break;
    case ScalarType::kLong: sums_of<uint64_t>(r, static_cast<const int64_t*>(x->data), y, false); break;
    default: return unsupported(0, static_cast<uint32_t>(type));
  }
  return {};
}

// The operands of a reduction (self, dim list, keepdim, out), input and output both of `type`.
struct Reduced {
  const Tensor* x;
  Tensor* out;
  Reduction r;
};

Result<Reduced> reduced_operands(KernelArgs& args, ScalarType type) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, type));
  KILN_TRY(uint32_t mask, dim_mask(args, 1, *x, false));
  KILN_TRY(bool keepdim, bool_arg(args, 2));
  KILN_TRY(Tensor * out, reduced_output(args, 3, *x, mask, keepdim, type));
  return Reduced{x, out, split(*x, mask)};
}

template <typename T>
void extremes_of(const Reduction& r, const Tensor& x, Tensor& out, bool largest) {
  const auto* in = static_cast<const T*>(x.data);
  auto* y = static_cast<T*>(out.data);
  for_each_output(r, [&](uint32_t o, uint32_t base, Walk<1> walk) {
    T best = in[base];
    for (uint64_t k = 1; k < r.count; ++k) {
      walk.next();
      const T v = in[base + walk.offset()];
      if (beats(v, best, largest)) best = v;
    }
    y[o] = best;
  });
}

Status extreme(KernelArgs& args, bool largest) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const ScalarType type, tensor_type(args, 0));
  KILN_TRY(const Reduced operands, reduced_operands(args, type));
  const Reduction& r = operands.r;
  if (r.count == 0) return unsupported(1);
  const Tensor& x = *operands.x;
  Tensor& out = *operands.out;
  switch (type) {
    case ScalarType::kFloat: extremes_of<float>(r, x, out, largest); break;
    case ScalarType::kBool: extremes_of<uint8_t>(r, x, out, largest); break;  // bools are 0 or 1
    case ScalarType::kChar: extremes_of<int8_t>(r, x, out, largest); break;
    case ScalarType::kShort: extremes_of<int16_t>(r, x, out, largest); break;
    case ScalarType::kInt: extremes_of<int32_t>(r, x, out, largest); break;
    case ScalarType::kLong: extremes_of<int64_t>(r, x, out, largest); break;
    default: return unsupported(0, static_cast<uint32_t>(type));
  }
  return {};
}

Status any_or_all(KernelArgs& args, bool every) {
  KILN_TRY(const Reduced operands, reduced_operands(args, ScalarType::kBool));
  const Reduction& r = operands.r;
  const auto* in = static_cast<const uint8_t*>(operands.x->data);  // bools: one byte each, 0 or not
  auto* y = static_cast<uint8_t*>(operands.out->data);
  for_each_output(r, [&](uint32_t o, uint32_t base, Walk<1> walk) {
    bool acc = every;  // stops at the first value that decides it
    for (uint64_t k = 0; k < r.count && acc == every; ++k, walk.next()) acc = in[base + walk.offset()] != 0;
    y[o] = acc ? 1 : 0;
  });
  return {};
}

template <typename T>
void arg_extreme_of(const Reduction& r, const T* in, int64_t* y, bool largest) {
  for_each_output(r, [&](uint32_t o, uint32_t base, Walk<1> walk) {
    T best = in[base];
    int64_t at = 0;
    for (uint64_t k = 1; k < r.count; ++k) {
      walk.next();
      const T v = in[base + walk.offset()];
      if (beats(v, best, largest)) best = v, at = static_cast<int64_t>(k);
    }
    y[o] = at;
  });
}

Status arg_extreme(KernelArgs& args, bool largest) {
  KILN_CHECK(expect_arity(args, 3));
  const Value& v = args[0];
  if (v.kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(v.kind));
  const ScalarType type = v.t.type;
  KILN_TRY(const Tensor* x, input_tensor(args, 0, type));
  uint32_t mask = (1u << x->dim) - 1;
  if (!is_null(args, 1)) {
    KILN_TRY(int64_t dim, int_arg(args, 1));
    KILN_TRY(size_t d, dim_index(dim, x->dim > 0 ? x->dim : 1, 1));
    mask &= 1u << d;
  }
  KILN_TRY(bool keepdim, bool_arg(args, 2));
  KILN_TRY(Tensor * out, reduced_output(args, 3, *x, mask, keepdim, ScalarType::kLong));
  const Reduction r = split(*x, mask);
  if (r.count == 0) return unsupported(0);
  auto* y = static_cast<int64_t*>(out->data);
  switch (type) {
    case ScalarType::kFloat: arg_extreme_of(r, f32(*x), y, largest); break;
    case ScalarType::kChar: arg_extreme_of(r, static_cast<const int8_t*>(x->data), y, largest); break;
    case ScalarType::kShort: arg_extreme_of(r, static_cast<const int16_t*>(x->data), y, largest); break;
    case ScalarType::kInt: arg_extreme_of(r, static_cast<const int32_t*>(x->data), y, largest); break;
    case ScalarType::kLong: arg_extreme_of(r, static_cast<const int64_t*>(x->data), y, largest); break;
    default: return unsupported(0, static_cast<uint32_t>(type));
  }
  return {};
}

// A tensor seen as [outer, n, inner] around one dimension (numel > 0: no product wraps).
struct Around {
  uint32_t outer = 1, n = 1, inner = 1;
};

Around around(const Tensor& t, size_t dim) {
  Around a;
  for (size_t d = 0; d < t.dim; ++d) {
    auto size = static_cast<uint32_t>(t.sizes[d]);
    if (d < dim)
      a.outer *= size;
    else if (d == dim)
      a.n = size;
    else
      a.inner *= size;
  }
  return a;
}

// Running sums along the middle of `a`: Acc is float (float32 out) or uint64_t (int64 out,
// wrapping), In the input's element type.
template <typename Acc, typename In, typename Out>
void running_sums(const Around& a, const In* in, Out* y) {
  for (uint32_t o = 0; o < a.outer; ++o) {
    for (uint32_t k = 0; k < a.inner; ++k) {
      Acc acc = 0;
      for (uint32_t i = 0; i < a.n; ++i) {
        const uint32_t at = (o * a.n + i) * a.inner + k;
        acc += static_cast<Acc>(in[at]);
        y[at] = static_cast<Out>(acc);
      }
    }
  }
}

Status softmax(KernelArgs& args, bool log) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const Tensor* x, input_tensor_any_order(args, 0, ScalarType::kFloat));
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  KILN_TRY(size_t dim, dim_index(dim_arg, x->dim, 1));
  KILN_TRY(bool half_to_float, bool_arg(args, 2));
  if (half_to_float) return unsupported(2);
  KILN_TRY(Tensor * out, output_tensor_any_order(args, 3, ScalarType::kFloat));
  if (!same_sizes(*out, *x)) return shape_mismatch(3);
  if (x->numel == 0) return {};
  Around a = around(*x, dim);
  const float* in = f32(*x);
  float* y = f32(*out);
  // Element l (row-major in the sizes) of x and of out, each in its DimOrder.
  const auto x_at = [&](uint32_t l) { return in[element_index(x->order, x->sizes, x->dim, l)]; };
  const auto y_at = [&](uint32_t l) -> float& { return y[element_index(out->order, out->sizes, out->dim, l)]; };
  for (uint32_t o = 0; o < a.outer; ++o) {
    for (uint32_t k = 0; k < a.inner; ++k) {
      const uint32_t base = o * a.n * a.inner + k;
      float max = x_at(base);
      for (uint32_t i = 1; i < a.n; ++i) max = max_of(max, x_at(base + i * a.inner));
      float total = 0.0f;
      for (uint32_t i = 0; i < a.n; ++i) total += kiln_expf(x_at(base + i * a.inner) - max);
      const float log_total = log ? kiln_logf(total) : 0.0f;
      for (uint32_t i = 0; i < a.n; ++i) {
        float shifted = x_at(base + i * a.inner) - max;
        y_at(base + i * a.inner) = log ? shifted - log_total : kiln_expf(shifted) / total;
      }
    }
  }
  return {};
}

}  // namespace

Status sum_intlist_out(KernelArgs& args) { return sum_or_mean(args, false); }
Status mean_out(KernelArgs& args) { return sum_or_mean(args, true); }
Status amax_out(KernelArgs& args) { return extreme(args, true); }
Status amin_out(KernelArgs& args) { return extreme(args, false); }
Status argmax_out(KernelArgs& args) { return arg_extreme(args, true); }
Status any_dims_out(KernelArgs& args) { return any_or_all(args, false); }
Status all_dims_out(KernelArgs& args) { return any_or_all(args, true); }
Status argmin_out(KernelArgs& args) { return arg_extreme(args, false); }

Status cumsum_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const ScalarType type, tensor_type(args, 0));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, type));
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  KILN_TRY(size_t dim, dim_index(dim_arg, x->dim > 0 ? x->dim : 1, 1));
  const bool floats = type == ScalarType::kFloat;
  if (!is_null(args, 2)) {
    KILN_TRY(int64_t dtype, int_arg(args, 2));
    if (dtype != (floats ? kFloatCode : kLongCode)) return unsupported(2, static_cast<uint32_t>(dtype));
  }
  KILN_TRY(Tensor * out, output_tensor(args, 3, floats ? ScalarType::kFloat : ScalarType::kLong));
  if (!same_sizes(*out, *x)) return shape_mismatch(3);
  if (x->numel == 0) return {};
  const Around a = around(*x, dim);
  auto* y = static_cast<int64_t*>(out->data);
  switch (type) {
    case ScalarType::kFloat: running_sums<float>(a, f32(*x), f32(*out)); break;
    case ScalarType::kBool: running_sums<uint64_t>(a, static_cast<const uint8_t*>(x->data), y); break;
    case ScalarType::kChar: running_sums<uint64_t>(a, static_cast<const int8_t*>(x->data), y); break;
    case ScalarType::kShort: running_sums<uint64_t>(a, static_cast<const int16_t*>(x->data), y); break;
    case ScalarType::kInt: running_sums<uint64_t>(a, static_cast<const int32_t*>(x->data), y); break;
    case ScalarType::kLong: running_sums<uint64_t>(a, static_cast<const int64_t*>(x->data), y); break;
    default: return unsupported(0, static_cast<uint32_t>(type));
  }
  return {};
}

Status softmax_out(KernelArgs& args) { return softmax(args, false); }
Status log_softmax_out(KernelArgs& args) { return softmax(args, true); }

}  // namespace kiln::runtime::kernels
