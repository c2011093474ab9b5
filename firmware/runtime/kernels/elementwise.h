// Shared by the elementwise kernels (internal): one-tensor maps and numpy broadcasting over
// up to three operands, each a tensor or a number, of element type T:
//   float (ScalarType Float), int8_t (Char), int16_t (Short), int32_t (Int), int64_t (Long), uint8_t (Bool: nonzero is
//   true, kernels write 0 or 1).
// A number operand takes T: a Double or Int as float for float tensors; only an Int for
// integer tensors, wrapped to T's width (two's complement); never for bool tensors.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/runtime/try.h"
#include "util.h"
#include "walk.h"

namespace kiln::runtime::kernels {

template <typename T>
constexpr ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<T, float>) return ScalarType::kFloat;
  if constexpr (std::is_same_v<T, int8_t>) return ScalarType::kChar;
  if constexpr (std::is_same_v<T, int16_t>) return ScalarType::kShort;
  if constexpr (std::is_same_v<T, int32_t>) return ScalarType::kInt;
  if constexpr (std::is_same_v<T, int64_t>) return ScalarType::kLong;
  if constexpr (std::is_same_v<T, uint8_t>) return ScalarType::kBool;
}

template <typename T>
const T* elements(const Tensor& t) {
  return static_cast<const T*>(t.data);
}
template <typename T>
T* elements(Tensor& t) {
  return static_cast<T*>(t.data);
}

// Two's complement arithmetic on integers without signed overflow: done in the unsigned
// type, converted back modulo 2^bits.
template <typename I>
I wrap(std::make_unsigned_t<I> u) {
  return static_cast<I>(u);
}
template <typename T>
T wrapping_add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return a + b;
  else
    return wrap<T>(static_cast<std::make_unsigned_t<T>>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)));
}
template <typename T>
T wrapping_sub(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return a - b;
  else
    return wrap<T>(static_cast<std::make_unsigned_t<T>>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)));
}
template <typename T>
T wrapping_mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return a * b;
  else
    return wrap<T>(static_cast<std::make_unsigned_t<T>>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)));
}

// y[i] = f(x[i]) for a tensor of In into a same-sized tensor of Out; arguments 1..arity-1
// are the caller's to check.
template <typename In, typename Out, typename F>
Status map(KernelArgs& args, size_t arity, F f) {
  KILN_CHECK(expect_arity(args, arity));
  KILN_TRY(const Tensor* in, input_tensor(args, 0, scalar_type_of<In>()));
  KILN_TRY(Tensor * out, output_tensor(args, arity, scalar_type_of<Out>()));
  if (!same_sizes(*out, *in)) return shape_mismatch(arity);
  const In* x = elements<In>(*in);
  Out* y = elements<Out>(*out);
  for (uint32_t i = 0; i < in->numel; ++i) y[i] = f(x[i]);
  return {};
}

template <typename F>
Status unary(KernelArgs& args, size_t arity, F f) {
  return map<float, float>(args, arity, f);
}

// Returns f(T{}) for T the element type of `type`: float32, an integer type, or (kWithBool) bool;
// for any other type bad_argument(position, 0x100 + type).
template <bool kWithBool, typename F>
Status with_element_type(ScalarType type, size_t position, F f) {
  switch (type) {
    case ScalarType::kFloat: return f(float{});
    case ScalarType::kChar: return f(int8_t{});
    case ScalarType::kShort: return f(int16_t{});
    case ScalarType::kInt: return f(int32_t{});
    case ScalarType::kLong: return f(int64_t{});
    case ScalarType::kBool:
      if constexpr (kWithBool) return f(uint8_t{});
      break;
    default: break;
  }
  return bad_argument(position, 0x100u + static_cast<uint32_t>(type));
}

// The value a bool element stands for: 1 if it is nonzero, else 0.
inline uint8_t truth(uint8_t x) { return x != 0 ? 1 : 0; }

// A one-tensor map of float32 or an integer type (or with kWithBool a bool, read as 0 or 1 and
// written as f(x) != 0) into the same type: f takes and returns it.
template <bool kWithBool = false, typename F>
Status numeric_map(KernelArgs& args, size_t arity, F f) {
  KILN_CHECK(expect_arity(args, arity));
  if (args[0].kind != ValueKind::kTensor) return bad_argument(0, static_cast<uint32_t>(args[0].kind));
  return with_element_type<kWithBool>(args[0].t.type, 0, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, uint8_t>)
      return map<T, T>(args, arity, [f](T x) { return truth(f(truth(x))); });
    else
      return map<T, T>(args, arity, f);
  });
}

// For integer kernels f(x) = x: floor, ceil, trunc and round of an integer.
template <typename T, typename F>
T on_floats(T x, F f) {
  if constexpr (std::is_floating_point_v<T>)
    return f(x);
  else
    return x;
}

// max(x, lo) then min(., hi), each keeping x when it is NaN and the bound on ties (so
// max(-0, 0) is +0), as numpy's maximum and minimum.
inline float clamp_nan(float x, float lo, float hi) {
  float v = (x != x || x > lo) ? x : lo;
  return (v != v || v < hi) ? v : hi;
}

// A String argument (points into the .pte).
Result<StringView> string_arg(const KernelArgs& args, size_t i);

// One operand of a broadcasting op: a tensor (data, dim, sizes, order) or a number (dim 0).
template <typename T>
struct Operand {
  const T* data;
  T scalar;
  size_t dim;
  const int32_t* sizes;
  DimOrder order;
  T at(uint32_t offset) const { return data ? data[offset] : scalar; }
};

template <typename T>
Result<Operand<T>> operand(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind == ValueKind::kDouble || v.kind == ValueKind::kInt) {
    if constexpr (std::is_same_v<T, float>) {
      KILN_TRY(double d, number_arg(args, i));
      return Operand<T>{nullptr, static_cast<float>(d), 0, nullptr, DimOrder::kContiguous};
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      return bad_argument(i, static_cast<uint32_t>(v.kind));
    } else {
      if (v.kind != ValueKind::kInt) return unsupported(i, static_cast<uint32_t>(v.kind));
      return Operand<T>{nullptr, wrap<T>(static_cast<std::make_unsigned_t<T>>(static_cast<uint64_t>(v.i))), 0, nullptr,
                        DimOrder::kContiguous};
    }
  }
  KILN_TRY(const Tensor* t, input_tensor_any_order(args, i, scalar_type_of<T>()));
  return Operand<T>{elements<T>(*t), T{}, t->dim, t->sizes, t->order};
}

// The scalar type of the first tensor among arguments i and j (a number takes it).
Result<ScalarType> tensor_type(const KernelArgs& args, size_t i, size_t j);

// Operand shapes (dim, sizes) broadcast to `out`: each size is out's or 1, out's sizes come
// from some operand (or are 1). `position` names out in errors.
Status check_broadcast(const Tensor& out, size_t position, const size_t* dims, const int32_t* const* sizes, size_t n);

// Element offsets in memory of an operand (dim, sizes, laid out in `order`: a channels-last one
// has 4 dims) along out's dims: 0 where it broadcasts.
void broadcast_strides(const Tensor& out, size_t dim, const int32_t* sizes, DimOrder order, uint32_t* strides);

// Calls f(i, offsets) for each element of `out` in row-major order of its sizes, i its offset in
// out's memory (its DimOrder), offsets[k] that of the element of operand k (dims[k], sizes[k],
// orders[k]) that broadcasts to it. Shapes must have passed check_broadcast.
template <size_t N, typename F>
void for_each_broadcast(const Tensor& out, const size_t (&dims)[N], const int32_t* const (&sizes)[N],
                        const DimOrder (&orders)[N], F f) {
  uint32_t strides[N + 1][kMaxDims];
  for (size_t k = 0; k < N; ++k) broadcast_strides(out, dims[k], sizes[k], orders[k], strides[k]);
  broadcast_strides(out, out.dim, out.sizes, out.order, strides[N]);
  Walk<N + 1> walk;
  for (size_t d = 0; d < out.dim; ++d) {
    uint32_t along[N + 1];
    for (size_t k = 0; k <= N; ++k) along[k] = strides[k][d];
    walk.add(static_cast<uint32_t>(out.sizes[d]), along);
  }
  uint32_t offsets[N];
  for (uint32_t i = 0; i < out.numel; ++i) {
    for (size_t k = 0; k < N; ++k) offsets[k] = walk.offset(k);
    f(walk.offset(N), offsets);
    walk.next();
  }
}

// out = f(a, b) with broadcasting: a at argument 0, b at 1 (tensors of T or numbers), out of
// R at position `arity`; each tensor in its own DimOrder.
template <typename T, typename R, typename F>
Status binary(KernelArgs& args, size_t arity, F f) {
  KILN_CHECK(expect_arity(args, arity));
  KILN_TRY(Operand<T> a, operand<T>(args, 0));
  KILN_TRY(Operand<T> b, operand<T>(args, 1));
  KILN_TRY(Tensor * out, output_tensor_any_order(args, arity, scalar_type_of<R>()));
  const size_t dims[2] = {a.dim, b.dim};
  const int32_t* const sizes[2] = {a.sizes, b.sizes};
  const DimOrder orders[2] = {a.order, b.order};
  KILN_CHECK(check_broadcast(*out, arity, dims, sizes, 2));
  R* y = elements<R>(*out);
  for_each_broadcast(*out, dims, sizes, orders,
                     [&](uint32_t i, const uint32_t* at) { y[i] = f(a.at(at[0]), b.at(at[1])); });
  return {};
}

// binary<T, T or bool> for T the operands' type (float32, an integer type or with kWithBool
// bool); `f` is generic. Bools as PyTorch computes with them: operands read as 0 or 1, a result
// written as f(a, b) != 0 (so add is or, mul and minimum are and, maximum is or).
template <bool kBoolOut, bool kWithBool = true, typename F>
Status numeric_binary(KernelArgs& args, size_t arity, F f) {
  KILN_TRY(ScalarType type, tensor_type(args, 0, 1));
  return with_element_type<kWithBool>(type, 0, [&](auto zero) {
    using T = decltype(zero);
    using R = std::conditional_t<kBoolOut, uint8_t, T>;
    if constexpr (std::is_same_v<T, uint8_t>)
      return binary<T, R>(args, arity, [f](T a, T b) -> R { return f(truth(a), truth(b)) != 0; });
    else
      return binary<T, R>(args, arity, f);
  });
}

}  // namespace kiln::runtime::kernels
