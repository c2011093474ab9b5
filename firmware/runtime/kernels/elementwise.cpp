// Elementwise kernels: activations of the first generation and broadcasting arithmetic.
// Each takes (self[, ...], out) with out's sizes checked; unary.cpp has the other float
// functions, compare.cpp comparisons, where and logical ops. The numpy twins are in
// kiln.program.kernels.elementwise, in the same float32 order of evaluation.
//   aten::relu.out        max(x, 0) as numpy's maximum: NaN stays, -0 becomes +0; integers too
//   aten::hardtanh.out    clamp_nan(x, float(min_val), float(max_val)); of integers, whole-number
//                         bounds within the type: max(x, min_val), then min(., max_val)
//   aten::clamp.out       the same with either bound optional (None: no bound)
//   aten::sigmoid.out     1 / (1 + exp(-x))
//   aten::tanh.out, aten::exp.out, aten::log.out   in double, rounded once (transcendental.h)
//   aten::reciprocal.out  1 / x
//   aten::add.out / aten::sub.out (self, other, alpha = 1) and aten::mul.out (self, other):
//     float32, int8, int16, int32 or int64 (integers wrap); numpy broadcasting; a number operand takes
//     the tensor's type (elementwise.h); add and mul of bools too (or, and), not sub
//   aten::div.out (self, other)  float32 a / b
//   aten::div.out_mode (self, other, rounding_mode): float32 with None (a / b), "trunc"
//     (trunc(a / b)) or "floor" (Python's floor division, div_floor below); integers with
//     "trunc" or "floor" (x / -1 wraps; a zero divisor is an error before anything is written)
//   aten::minimum.out / aten::maximum.out: NaN if either is NaN, else the smaller/larger,
//     self on ties; float32, integers or bools (and, or)
#include <cmath>
#include <initializer_list>
#include <limits>

#include "elementwise.h"
#include "transcendental.h"

namespace kiln::runtime::kernels {

Result<ScalarType> tensor_type(const KernelArgs& args, size_t i, size_t j) {
  for (size_t k : {i, j}) {
    if (args[k].kind == ValueKind::kTensor) return args[k].t.type;
  }
  return bad_argument(i, static_cast<uint32_t>(args[i].kind));
}

Status check_broadcast(const Tensor& out, size_t position, const size_t* dims, const int32_t* const* sizes, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    if (dims[k] > out.dim) return shape_mismatch(position, static_cast<uint32_t>(k));
  }
  for (size_t d = 0; d < out.dim; ++d) {
    bool matched = out.sizes[d] == 1;
    for (size_t k = 0; k < n; ++k) {
      size_t lead = out.dim - dims[k];
      int32_t size = d < lead ? 1 : sizes[k][d - lead];
      if (size != out.sizes[d] && size != 1) return shape_mismatch(position, static_cast<uint32_t>(d));
      matched = matched || size == out.sizes[d];
    }
    if (!matched) return shape_mismatch(position, static_cast<uint32_t>(d));
  }
  return {};
}

void broadcast_strides(const Tensor& out, size_t dim, const int32_t* sizes, DimOrder order, uint32_t* strides) {
  // The operand's own steps in memory: row-major, or N, H, W, C for a channels-last one.
  uint32_t own[kMaxDims];
  if (order == DimOrder::kChannelsLast && dim == 4) {
    const auto c = static_cast<uint32_t>(sizes[1]), w = static_cast<uint32_t>(sizes[3]);
    own[0] = c * w * static_cast<uint32_t>(sizes[2]), own[1] = 1, own[2] = w * c, own[3] = c;
  } else {
    uint32_t stride = 1;
    for (size_t d = dim; d-- > 0;) {
      own[d] = stride;
      stride *= static_cast<uint32_t>(sizes[d]);
    }
  }
  const size_t lead = out.dim - dim;
  for (size_t d = 0; d < out.dim; ++d) {
    const int32_t size = d < lead ? 1 : sizes[d - lead];
    strides[d] = (size == 1 && out.sizes[d] != 1) || d < lead ? 0 : own[d - lead];
  }
}

Result<StringView> string_arg(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind != ValueKind::kString) return bad_argument(i, static_cast<uint32_t>(v.kind));
  return v.s;
}

namespace {

Status check_alpha(const KernelArgs& args) {
  if (is_null(args, 2)) return {};
  KILN_TRY(double alpha, number_arg(args, 2));
  if (alpha != 1.0) return unsupported(2);
  return {};
}

// An optional number argument as a float bound; `none` when it is None.
Result<float> bound_arg(const KernelArgs& args, size_t i, float none) {
  if (is_null(args, i)) return none;
  KILN_TRY(double d, number_arg(args, i));
  return static_cast<float>(d);
}

// Python's floor division of floats, as PyTorch computes it: m = fmod(a, b),
// d = (a - m) / b, less 1 when m != 0 and m's sign differs from b's; then floor(d), plus 1
// when d - floor(d) > 0.5; d == 0 gives a zero with a / b's sign; b == 0 gives a / b.
float div_floor(float a, float b) {
  if (b == 0.0f) return a / b;
  float m = std::fmod(a, b);
  float d = (a - m) / b;
  if (m != 0.0f && (b < 0.0f) != (m < 0.0f)) d -= 1.0f;
  if (d == 0.0f) return std::copysign(0.0f, a / b);
  float fl = std::floor(d);
  return d - fl > 0.5f ? fl + 1.0f : fl;
}

// Integer division toward zero or down; b != 0 (checked); x / -1 is the wrapped -x.
template <typename I>
I div_int(I a, I b, bool floor) {
  if (b == -1) return wrapping_sub<I>(0, a);
  I q = a / b;
  if (floor && a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

template <typename I>
Status div_int_out(KernelArgs& args, bool floor) {
  KILN_TRY(Operand<I> b, operand<I>(args, 1));
  if (args[1].kind != ValueKind::kTensor) {
    if (b.scalar == 0) return unsupported(1);
  } else {
    for (uint32_t i = 0; i < args[1].t.numel; ++i) {
      if (b.data[i] == 0) return unsupported(1, i);
    }
  }
  return binary<I, I>(args, 3, [floor](I x, I y) { return div_int(x, y, floor); });
}

// A clamp bound of integer type I: a whole number (Int or Double) within I's range, or (when
// `optional`) None for `none`.
template <typename I>
Result<I> integer_bound(const KernelArgs& args, size_t i, bool optional, I none) {
  if (optional && is_null(args, i)) return none;
  constexpr I kMin = std::numeric_limits<I>::min(), kMax = std::numeric_limits<I>::max();
  if (args[i].kind == ValueKind::kInt) {
    const int64_t v = args[i].i;
    if (v < kMin || v > kMax) return unsupported(i);
    return static_cast<I>(v);
  }
  KILN_TRY(const double d, number_arg(args, i));
  // -(double)kMin is kMax + 1, exactly (a power of two): d below it fits I
  if (d != std::trunc(d) || d < static_cast<double>(kMin) || d >= -static_cast<double>(kMin)) return unsupported(i);
  return static_cast<I>(d);
}

template <typename I>
Status clamp_typed(KernelArgs& args, bool optional) {
  KILN_TRY(const I lo, integer_bound<I>(args, 1, optional, std::numeric_limits<I>::min()));
  KILN_TRY(const I hi, integer_bound<I>(args, 2, optional, std::numeric_limits<I>::max()));
  return map<I, I>(args, 3, [lo, hi](I x) {
    const I v = x < lo ? lo : x;
    return v > hi ? hi : v;
  });
}

// hardtanh (bounds required) or clamp (either optional) of integers: max(x, lo), then min(., hi).
Status clamp_integers(KernelArgs& args, bool optional) {
  switch (args[0].t.type) {
    case ScalarType::kChar: return clamp_typed<int8_t>(args, optional);
    case ScalarType::kShort: return clamp_typed<int16_t>(args, optional);
    case ScalarType::kInt: return clamp_typed<int32_t>(args, optional);
    case ScalarType::kLong: return clamp_typed<int64_t>(args, optional);
    default: return bad_argument(0, 0x100u + static_cast<uint32_t>(args[0].t.type));
  }
}

}  // namespace

Status relu_out(KernelArgs& args) {
  return numeric_map(args, 1, [](auto x) -> decltype(x) { return (x > 0 || x != x) ? x : 0; });
}

Status hardtanh_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  if (args[0].kind == ValueKind::kTensor && args[0].t.type != ScalarType::kFloat) return clamp_integers(args, false);
  KILN_TRY(double lo_arg, number_arg(args, 1));
  KILN_TRY(double hi_arg, number_arg(args, 2));
  const float lo = static_cast<float>(lo_arg), hi = static_cast<float>(hi_arg);
  return unary(args, 3, [lo, hi](float x) { return clamp_nan(x, lo, hi); });
}

Status clamp_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  if (args[0].kind == ValueKind::kTensor && args[0].t.type != ScalarType::kFloat) return clamp_integers(args, true);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  KILN_TRY(float lo, bound_arg(args, 1, -kInf));
  KILN_TRY(float hi, bound_arg(args, 2, kInf));
  return unary(args, 3, [lo, hi](float x) { return clamp_nan(x, lo, hi); });
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
  KILN_CHECK(expect_arity(args, 3));
  KILN_CHECK(check_alpha(args));
  return numeric_binary<false>(args, 3, [](auto a, auto b) { return wrapping_add(a, b); });
}

Status sub_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_CHECK(check_alpha(args));
  // not of bools, which PyTorch refuses to subtract
  return numeric_binary<false, false>(args, 3, [](auto a, auto b) { return wrapping_sub(a, b); });
}

Status mul_out(KernelArgs& args) {
  return numeric_binary<false>(args, 2, [](auto a, auto b) { return wrapping_mul(a, b); });
}

Status div_out(KernelArgs& args) {
  return binary<float, float>(args, 2, [](float a, float b) { return a / b; });
}

Status div_out_mode(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  enum class Mode { kTrue, kTrunc, kFloor } mode = Mode::kTrue;
  if (!is_null(args, 2)) {
    KILN_TRY(StringView s, string_arg(args, 2));
    if (s == StringView("trunc"))
      mode = Mode::kTrunc;
    else if (s == StringView("floor"))
      mode = Mode::kFloor;
    else
      return unsupported(2);
  }
  KILN_TRY(ScalarType type, tensor_type(args, 0, 1));
  if (type == ScalarType::kFloat) {
    switch (mode) {
      case Mode::kTrue: return binary<float, float>(args, 3, [](float a, float b) { return a / b; });
      case Mode::kTrunc: return binary<float, float>(args, 3, [](float a, float b) { return std::trunc(a / b); });
      case Mode::kFloor: return binary<float, float>(args, 3, div_floor);
    }
  }
  if (mode == Mode::kTrue) return unsupported(2);
  if (type == ScalarType::kChar) return div_int_out<int8_t>(args, mode == Mode::kFloor);
  if (type == ScalarType::kShort) return div_int_out<int16_t>(args, mode == Mode::kFloor);
  if (type == ScalarType::kInt) return div_int_out<int32_t>(args, mode == Mode::kFloor);
  if (type == ScalarType::kLong) return div_int_out<int64_t>(args, mode == Mode::kFloor);
  return bad_argument(0, 0x100u + static_cast<uint32_t>(type));
}

Status minimum_out(KernelArgs& args) {
  return numeric_binary<false>(args, 2, [](auto a, auto b) -> decltype(a) {
    if constexpr (std::is_floating_point_v<decltype(a)>) {
      if (a != a || b != b) return std::numeric_limits<float>::quiet_NaN();
    }
    return b < a ? b : a;
  });
}

Status maximum_out(KernelArgs& args) {
  return numeric_binary<false>(args, 2, [](auto a, auto b) -> decltype(a) {
    if constexpr (std::is_floating_point_v<decltype(a)>) {
      if (a != a || b != b) return std::numeric_limits<float>::quiet_NaN();
    }
    return b > a ? b : a;
  });
}

}  // namespace kiln::runtime::kernels
