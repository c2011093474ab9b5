// Data-movement kernels of any scalar type, as kiln.program.kernels.movement defines them:
//   aten::slice_copy.Tensor_out (self, dim, start, end, step, out): start/end None or
//       clamped to [0, size] after adding size to a negative one; step >= 1
//   aten::select_copy.int_out (self, dim, index, out): index in [-size, size)
//   aten::permute_copy.out (self, dims, out)
//   aten::expand_copy.out (self, size, implicit, out): new leading dims, -1 keeps a dim,
//       a dim of size 1 repeats
//   aten::flip.out (self, dims, out)
//   aten::cat.out (tensors, dim, out): tensors of out's type and rank
//   aten::constant_pad_nd.out (self, pad, value, out); aten::reflection_pad{1,2,3}d.out,
//       aten::replication_pad{1,2,3}d.out, aten::_pad_circular.out (self, pad, out): pads
//       from the last dim backwards; the copying modes pad a tensor with one or two more dims
//   aten::upsample_nearest2d.vec_out (input, output_size, scale_factors, out), NCHW
//   dim_order_ops::_clone_dim_order.out (self, non_blocking, dim_order, out): a copy of self
//       into out's DimOrder; dim_order None or out's (ExecuTorch's)
// Each is a gather (movement.h), reading and writing each tensor in its own DimOrder, except
// cat, which copies runs of bytes of contiguous tensors.
#include <cmath>
#include <cstring>

#include "kiln/runtime/try.h"
#include "movement.h"

namespace kiln::runtime::kernels {

namespace {

constexpr int64_t kMaxPad = int64_t{1} << 30;

int64_t nearest_source(const Axis& a, int64_t o) {
  if (a.size == a.extent) return o;
  if (a.size == 2 * a.extent) return o >> 1;
  int64_t src = static_cast<int64_t>(std::floor(static_cast<float>(o) * a.scale));
  return src < a.extent - 1 ? src : a.extent - 1;
}

// The input coordinate of output coordinate o along `a`, or -1 for the fill value.
int64_t source(const Axis& a, int64_t o) {
  int64_t c = o - a.before;
  switch (a.map) {
    case Map::kAffine: return a.first + a.step * o;
    case Map::kConstant: return c >= 0 && c < a.extent ? c : -1;
    case Map::kReflect:
      if (c < 0) c = -c;
      return c >= a.extent ? 2 * (a.extent - 1) - c : c;
    case Map::kReplicate: return c < 0 ? 0 : (c >= a.extent ? a.extent - 1 : c);
    case Map::kCircular: return c < 0 ? c + a.extent : (c >= a.extent ? c - a.extent : c);
    case Map::kNearest: return nearest_source(a, o);
  }
  return -2;
}

// out_steps: the element steps in out's memory of its dims (nullptr: contiguous, element e of
// the walk at e).
template <size_t N>
Status gather_n(const Tensor& in, Tensor& out, const Axis* axes, size_t dim, int64_t base, const void* fill,
                const int64_t* out_steps, size_t position) {
  const auto* src = static_cast<const uint8_t*>(in.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  int64_t coords[kMaxDims] = {};
  for (uint32_t walked = 0; walked < out.numel; ++walked) {
    int64_t e = walked;
    if (out_steps != nullptr) {
      e = 0;
      for (size_t d = 0; d < dim; ++d) e += coords[d] * out_steps[d];
    }
    int64_t offset = base;
    bool filled = false;
    for (size_t d = 0; d < dim; ++d) {
      int64_t c = source(axes[d], coords[d]);
      if (c == -1 && axes[d].map == Map::kConstant) {
        filled = true;
      } else if (c < 0 || c >= axes[d].extent) {
        return bad_argument(position, static_cast<uint32_t>(d));
      }
      offset += c * axes[d].stride;
    }
    if (filled) {
      std::memcpy(dst + static_cast<size_t>(e) * N, fill, N);
    } else {
      if (offset < 0 || offset >= static_cast<int64_t>(in.numel)) return bad_argument(position, 0x400);
      std::memcpy(dst + static_cast<size_t>(e) * N, src + static_cast<size_t>(offset) * N, N);
    }
    for (size_t d = dim; d-- > 0;) {
      if (++coords[d] < axes[d].size) break;
      coords[d] = 0;
    }
  }
  return {};
}

// A gather's start: the call's input (argument 0) and out (argument n) of one scalar type,
// and an identity axis for each of the input's dims, which the kernel then changes.
struct Copy {
  const Tensor* in = nullptr;
  Tensor* out = nullptr;
  int64_t strides[kMaxDims] = {};
  Axis axes[kMaxDims];
};

Result<Copy> start_copy(KernelArgs& args, size_t n) {
  KILN_CHECK(expect_arity(args, n));
  Copy c;
  if (args[0].kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(args[0].kind));
  KILN_TRY(c.in, input_tensor_any_order(args, 0, args[0].t.type));
  KILN_TRY(c.out, output_tensor_any_order(args, n, c.in->type));
  KILN_CHECK(memory_strides(*c.in, c.strides, 0));
  for (size_t d = 0; d < c.in->dim; ++d) c.axes[d] = identity_axis(*c.in, c.strides, d);
  return c;
}

// out's sizes checked against `axes`, then the gather.
Status finish_copy(const Copy& c, const Axis* axes, size_t dim, int64_t base, const void* fill, size_t n) {
  KILN_CHECK(expect_axes(*c.out, axes, dim, n));
  return gather(*c.in, *c.out, axes, dim, base, fill, 0);
}

// The pads (before, after) of each of in's dims, from a list of pairs for the last dims backwards.
Status read_pads(const KernelArgs& args, size_t i, const Tensor& in, int64_t before[kMaxDims], int64_t after[kMaxDims],
                 size_t* padded) {
  int64_t pads[2 * kMaxDims];
  size_t count = 0;
  KILN_CHECK(int_list_arg(args, i, pads, 2 * kMaxDims, &count));
  if (count % 2 != 0 || count / 2 > in.dim) return unsupported(i, static_cast<uint32_t>(count));
  for (size_t d = 0; d < in.dim; ++d) before[d] = after[d] = 0;
  for (size_t k = 0; k < count / 2; ++k) {
    int64_t b = pads[2 * k], a = pads[2 * k + 1];
    if (b < -kMaxPad || b > kMaxPad || a < -kMaxPad || a > kMaxPad) return unsupported(i, static_cast<uint32_t>(k));
    before[in.dim - 1 - k] = b, after[in.dim - 1 - k] = a;
  }
  *padded = count / 2;
  return {};
}

// The fill element for constant_pad_nd: `value` (Int or Double) as out's type; an integer
// type takes only integral values it can hold (bool: 0 or 1).
Status fill_value(const KernelArgs& args, size_t i, ScalarType type, uint8_t fill[8]) {
  const Value& v = args[i];
  if (v.kind != ValueKind::kInt && v.kind != ValueKind::kDouble) return bad_argument(i, static_cast<uint32_t>(v.kind));
  if (type == ScalarType::kFloat) {
    float f = v.kind == ValueKind::kInt ? static_cast<float>(v.i) : static_cast<float>(v.d);
    std::memcpy(fill, &f, sizeof f);
    return {};
  }
  int64_t low, high;
  switch (type) {
    case ScalarType::kBool: low = 0, high = 1; break;
    case ScalarType::kChar: low = INT8_MIN, high = INT8_MAX; break;
    case ScalarType::kShort: low = INT16_MIN, high = INT16_MAX; break;
    case ScalarType::kInt: low = INT32_MIN, high = INT32_MAX; break;
    case ScalarType::kLong: low = INT64_MIN, high = INT64_MAX; break;
    default: return unsupported(i, static_cast<uint32_t>(type));
  }
  int64_t n;
  if (v.kind == ValueKind::kInt) {
    n = v.i;
  } else {
    // doubles in (-2^63, 2^63) convert exactly when integral
    if (!(v.d > -9223372036854775808.0 && v.d < 9223372036854775808.0) || std::trunc(v.d) != v.d) {
      return unsupported(i);
    }
    n = static_cast<int64_t>(v.d);
  }
  if (n < low || n > high) return unsupported(i);
  const size_t bytes = element_size(static_cast<int8_t>(type));
  // little-endian: the low `bytes` bytes of n are the value in the narrower type
  for (size_t b = 0; b < bytes; ++b) fill[b] = static_cast<uint8_t>(static_cast<uint64_t>(n) >> (8 * b));
  return {};
}

// Padding in `map` mode of in's last `dims` dims (0: any number, constant mode only).
Status pad(KernelArgs& args, size_t n_args, Map map, size_t dims) {
  KILN_TRY(Copy c, start_copy(args, n_args));
  const Tensor* in = c.in;
  int64_t before[kMaxDims], after[kMaxDims];
  size_t padded = 0;
  KILN_CHECK(read_pads(args, 1, *in, before, after, &padded));
  if (map != Map::kConstant) {
    if ((dims != 0 && padded != dims) || padded == 0 || in->dim < padded + 1 || in->dim > padded + 2) {
      return unsupported(1, static_cast<uint32_t>(padded));
    }
  }
  uint8_t fill[8] = {};
  if (map == Map::kConstant) KILN_CHECK(fill_value(args, 2, in->type, fill));
  Axis* axes = c.axes;
  for (size_t d = 0; d < in->dim; ++d) {
    const int64_t size = in->sizes[d], b = before[d], a = after[d];
    if (b == 0 && a == 0) continue;
    if (map != Map::kConstant) {
      if (b < 0 || a < 0 || size == 0) return unsupported(1, static_cast<uint32_t>(d));
      if (map == Map::kReflect && (b >= size || a >= size)) return unsupported(1, static_cast<uint32_t>(d));
      if (map == Map::kCircular && (b > size || a > size)) return unsupported(1, static_cast<uint32_t>(d));
    }
    if (size + b + a < 0) return shape_mismatch(1, static_cast<uint32_t>(d));
    axes[d].map = map, axes[d].before = b, axes[d].size = size + b + a;
  }
  return finish_copy(c, axes, in->dim, 0, fill, n_args);
}

}  // namespace

Result<const Tensor*> any_tensor(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind != ValueKind::kTensor) return bad_argument(i, static_cast<uint32_t>(v.kind));
  return input_tensor(args, i, v.t.type);
}

Result<Tensor*> output_like(const KernelArgs& args, size_t n, const Tensor& like) {
  return output_tensor(args, n, like.type);
}

Status contiguous_strides(const Tensor& t, int64_t* strides, size_t position) {
  int64_t s = t.numel == 0 ? 0 : 1;
  for (size_t d = t.dim; d-- > 0;) {
    strides[d] = s;
    KILN_TRY(s, checked_mul(s, t.sizes[d], position));
  }
  return {};
}

Status memory_strides(const Tensor& t, int64_t* strides, size_t position) {
  KILN_CHECK(contiguous_strides(t, strides, position));
  if (t.order == DimOrder::kChannelsLast && t.numel != 0) nchw_steps(t, strides);  // 4-D
  return {};
}

Axis identity_axis(const Tensor& in, const int64_t* strides, size_t d) {
  Axis a;
  a.size = a.extent = in.sizes[d];
  a.stride = strides[d];
  return a;
}

Status expect_axes(const Tensor& out, const Axis* axes, size_t dim, size_t position) {
  if (out.dim != dim) return shape_mismatch(position, out.dim);
  for (size_t d = 0; d < dim; ++d) {
    if (out.sizes[d] != axes[d].size) return shape_mismatch(position, static_cast<uint32_t>(d));
  }
  return {};
}

Status gather(const Tensor& in, Tensor& out, const Axis* axes, size_t dim, int64_t base, const void* fill,
              size_t position) {
  if (out.type != in.type || dim > kMaxDims) return bad_argument(position);
  int64_t steps[kMaxDims];
  const int64_t* out_steps = nullptr;
  if (out.order != DimOrder::kContiguous) {
    if (out.dim != dim) return bad_argument(position);
    KILN_CHECK(memory_strides(out, steps, position));
    out_steps = steps;
  }
  switch (element_size(static_cast<int8_t>(in.type))) {
    case 1: return gather_n<1>(in, out, axes, dim, base, fill, out_steps, position);
    case 2: return gather_n<2>(in, out, axes, dim, base, fill, out_steps, position);
    case 4: return gather_n<4>(in, out, axes, dim, base, fill, out_steps, position);
    case 8: return gather_n<8>(in, out, axes, dim, base, fill, out_steps, position);
    default: return unsupported(position, static_cast<uint32_t>(in.type));
  }
}

Status slice_copy_tensor_out(KernelArgs& args) {
  KILN_TRY(Copy c, start_copy(args, 5));
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  KILN_TRY(size_t dim, dim_index(dim_arg, c.in->dim, 1));
  const int64_t size = c.in->sizes[dim];
  int64_t start = 0, end = size;
  if (!is_null(args, 2)) {
    KILN_TRY(start, int_arg(args, 2));
  }
  if (!is_null(args, 3)) {
    KILN_TRY(end, int_arg(args, 3));
  }
  KILN_TRY(int64_t step, int_arg(args, 4));
  if (step < 1) return unsupported(4);
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : (start > size ? size : start);
  end = end < start ? start : (end > size ? size : end);
  Axis& a = c.axes[dim];
  a.first = start, a.step = step, a.size = end > start ? (end - start - 1) / step + 1 : 0;
  return finish_copy(c, c.axes, c.in->dim, 0, nullptr, 5);
}

Status select_copy_int_out(KernelArgs& args) {
  KILN_TRY(Copy c, start_copy(args, 3));
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  KILN_TRY(size_t dim, dim_index(dim_arg, c.in->dim, 1));
  KILN_TRY(int64_t index, int_arg(args, 2));
  const int64_t size = c.in->sizes[dim];
  if (index < -size || index >= size) return bad_argument(2, static_cast<uint32_t>(index));
  if (index < 0) index += size;
  for (size_t d = dim; d + 1 < c.in->dim; ++d) c.axes[d] = c.axes[d + 1];  // without dim
  KILN_TRY(const int64_t base, checked_mul(index, c.strides[dim], 2));
  return finish_copy(c, c.axes, c.in->dim - 1u, base, nullptr, 3);
}

Status permute_copy_out(KernelArgs& args) {
  KILN_TRY(Copy c, start_copy(args, 2));
  int64_t dims[kMaxDims];
  size_t count = 0;
  KILN_CHECK(int_list_arg(args, 1, dims, kMaxDims, &count));
  if (count != c.in->dim) return shape_mismatch(1, static_cast<uint32_t>(count));
  bool seen[kMaxDims] = {};
  Axis axes[kMaxDims];
  for (size_t d = 0; d < count; ++d) {
    KILN_TRY(size_t source_dim, dim_index(dims[d], c.in->dim, 1));
    if (seen[source_dim]) return bad_argument(1, static_cast<uint32_t>(d));
    seen[source_dim] = true;
    axes[d] = c.axes[source_dim];
  }
  return finish_copy(c, axes, count, 0, nullptr, 2);
}

Status dim_order_ops_clone_dim_order_out(KernelArgs& args) {
  KILN_TRY(Copy c, start_copy(args, 3));
  KILN_CHECK(bool_arg(args, 1));  // non_blocking: no effect on the values
  if (!is_null(args, 2)) {
    int64_t order[kMaxDims];
    size_t count = 0;
    KILN_CHECK(int_list_arg(args, 2, order, kMaxDims, &count));
    if (count != c.out->dim) return shape_mismatch(2, static_cast<uint32_t>(count));
    uint8_t bytes[kMaxDims];
    for (size_t d = 0; d < count; ++d) {
      if (order[d] < 0 || order[d] >= static_cast<int64_t>(count)) return bad_argument(2, static_cast<uint32_t>(d));
      bytes[d] = static_cast<uint8_t>(order[d]);
    }
    DimOrder named;
    if (!dim_order_of(c.out->sizes, bytes, count, &named) || named != c.out->order) return unsupported(2);
  }
  return finish_copy(c, c.axes, c.in->dim, 0, nullptr, 3);
}

Status expand_copy_out(KernelArgs& args) {
  KILN_TRY(Copy c, start_copy(args, 3));
  const Tensor* in = c.in;
  int64_t size[kMaxDims];
  size_t count = 0;
  KILN_CHECK(int_list_arg(args, 1, size, kMaxDims, &count));
  KILN_TRY(bool implicit, bool_arg(args, 2));
  (void)implicit;  // only autograd reads it
  if (count < in->dim) return shape_mismatch(1, static_cast<uint32_t>(count));
  Axis axes[kMaxDims];
  const size_t lead = count - in->dim;
  for (size_t d = 0; d < count; ++d) {
    if (d < lead) {  // a new dim: every output coordinate reads the same input
      if (size[d] < 0 || size[d] > INT32_MAX) return unsupported(1, static_cast<uint32_t>(d));
      axes[d].size = size[d], axes[d].step = 0;
      continue;
    }
    axes[d] = c.axes[d - lead];
    if (size[d] == -1 || size[d] == axes[d].size) continue;
    if (axes[d].size != 1 || size[d] < 0 || size[d] > INT32_MAX) return shape_mismatch(1, static_cast<uint32_t>(d));
    axes[d].size = size[d], axes[d].step = 0;
  }
  return finish_copy(c, axes, count, 0, nullptr, 3);
}

Status flip_out(KernelArgs& args) {
  KILN_TRY(Copy c, start_copy(args, 2));
  int64_t dims[kMaxDims];
  size_t count = 0;
  KILN_CHECK(int_list_arg(args, 1, dims, kMaxDims, &count));
  for (size_t k = 0; k < count; ++k) {
    KILN_TRY(size_t d, dim_index(dims[k], c.in->dim, 1));
    Axis& a = c.axes[d];
    if (a.step == -1) return bad_argument(1, static_cast<uint32_t>(k));  // a dim given twice
    a.first = a.size - 1, a.step = -1;
  }
  return finish_copy(c, c.axes, c.in->dim, 0, nullptr, 2);
}

Status cat_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  const Value& list = args[0];
  if (list.kind != ValueKind::kTensorList || list.list.count == 0) return bad_argument(0);
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  const Value& out_value = args[2];
  if (out_value.kind != ValueKind::kTensor) return bad_argument(2);
  KILN_TRY(Tensor * out, output_tensor(args, 2, out_value.t.type));
  KILN_TRY(size_t dim, dim_index(dim_arg, out->dim, 1));
  const size_t elem = element_size(static_cast<int8_t>(out->type));
  int64_t total = 0;
  for (size_t k = 0; k < list.list.count; ++k) {
    const Tensor& t = args.tensor_item(list, k);
    if (t.type != out->type || (t.data == nullptr && t.nbytes != 0)) return bad_argument(0, static_cast<uint32_t>(k));
    if (t.dim != out->dim) return shape_mismatch(0, static_cast<uint32_t>(k));
    for (size_t d = 0; d < out->dim; ++d) {
      if (d != dim && t.sizes[d] != out->sizes[d]) return shape_mismatch(0, static_cast<uint32_t>(k));
    }
    KILN_TRY(total, checked_add(total, t.sizes[dim], 0));
  }
  if (total != out->sizes[dim]) return shape_mismatch(2, static_cast<uint32_t>(dim));
  if (out->numel == 0) return {};  // nothing to copy, however many (empty) rows
  // out is `outer` rows, each the inputs' rows (sizes[dim] * inner elements) side by side;
  // out has elements, so these products are at most its numel
  KILN_TRY(const int64_t outer, size_product(*out, 0, dim, 2));
  KILN_TRY(const int64_t inner, size_product(*out, dim + 1, out->dim, 2));
  auto* dst = static_cast<uint8_t*>(out->data);
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < list.list.count; ++k) {
      const Tensor& t = args.tensor_item(list, k);
      const size_t run = static_cast<size_t>(t.sizes[dim] * inner) * elem;  // <= t.nbytes (rows of t)
      if (run == 0) continue;
      if (t.data == out->data) return bad_argument(0, static_cast<uint32_t>(k));  // never aliased
      std::memcpy(dst, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(o) * run, run);
      dst += run;
    }
  }
  return {};
}

Status constant_pad_nd_out(KernelArgs& args) { return pad(args, 3, Map::kConstant, 0); }
Status reflection_pad1d_out(KernelArgs& args) { return pad(args, 2, Map::kReflect, 1); }
Status reflection_pad2d_out(KernelArgs& args) { return pad(args, 2, Map::kReflect, 2); }
Status reflection_pad3d_out(KernelArgs& args) { return pad(args, 2, Map::kReflect, 3); }
Status replication_pad1d_out(KernelArgs& args) { return pad(args, 2, Map::kReplicate, 1); }
Status replication_pad2d_out(KernelArgs& args) { return pad(args, 2, Map::kReplicate, 2); }
Status replication_pad3d_out(KernelArgs& args) { return pad(args, 2, Map::kReplicate, 3); }
Status pad_circular_out(KernelArgs& args) { return pad(args, 2, Map::kCircular, 0); }

Status upsample_nearest2d_vec_out(KernelArgs& args) {
  KILN_TRY(Copy c, start_copy(args, 3));
  if (c.in->dim != 4) return unsupported(0, c.in->dim);
  Axis* axes = c.axes;
  if (!is_null(args, 1)) {
    int64_t size[2];
    size_t count = 0;
    KILN_CHECK(int_list_arg(args, 1, size, 2, &count));
    if (count != 2) return unsupported(1);
    for (size_t k = 0; k < 2; ++k) {
      Axis& a = axes[2 + k];
      if (size[k] < 1 || size[k] > INT32_MAX || a.extent < 1) return unsupported(1, static_cast<uint32_t>(k));
      a.map = Map::kNearest, a.size = size[k];
      a.scale = static_cast<float>(a.extent) / static_cast<float>(a.size);
    }
  } else {
    const Value& scales = args[2];
    if (scales.kind != ValueKind::kDoubleList || scales.list.count != 2) return bad_argument(2);
    for (size_t k = 0; k < 2; ++k) {
      Axis& a = axes[2 + k];
      double s;
      std::memcpy(&s, static_cast<const uint8_t*>(scales.list.items) + 8 * k, sizeof s);
      if (!(s > 0.0 && s < 65536.0)) return unsupported(2, static_cast<uint32_t>(k));
      const double size = static_cast<double>(a.extent) * s;
      if (size < 1.0 || size > static_cast<double>(INT32_MAX)) return unsupported(2, static_cast<uint32_t>(k));
      a.map = Map::kNearest, a.size = static_cast<int64_t>(size);
      a.scale = static_cast<float>(1.0 / s);
    }
  }
  return finish_copy(c, axes, 4, 0, nullptr, 3);
}

}  // namespace kiln::runtime::kernels
