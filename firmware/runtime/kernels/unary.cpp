// Float32 functions of one tensor (self[, scalars], out), out's sizes equal to self's. Each
// is the numpy kernel of kiln.program.kernels.elementwise in the same float32 order; the
// transcendental parts are evaluated in double and rounded once (transcendental.h).
//   hardsigmoid      clamp_nan(x + 3, 0, 6) / 6
//   hardswish        x * clamp_nan(x + 3, 0, 6) / 6 (the product first)
//   leaky_relu       x > 0 ? x : x * float(negative_slope)
//   gelu             approximate "none": x * 0.5 * (1 + erf(x * float(M_SQRT1_2)));
//                    "tanh": 0.5 * x * (1 + tanh(beta * (x + kappa * (x * x * x))))
//   silu             x / (1 + exp(-x))
//   elu              x <= 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale, the
//                    coefficients float32 (selu and celu are elu with their constants)
//   softplus         x * beta > threshold ? x : log1p(exp(x * beta)) / beta
//   mish             x * tanh(log1p(exp(x)))
//   sqrt             IEEE square root (correctly rounded); rsqrt 1 / sqrt(x)
//   sin, cos, erf    in double, rounded once
//   abs, neg, floor, ceil, trunc, round (half to even); of integers too (abs and neg wrap:
//                    abs(MIN) is MIN; floor, ceil, trunc, round keep them)
//   sign             (x > 0) - (x < 0): NaN and -0 give +0; of integers and bools too (a bool's is itself)
//   pow.Tensor_Scalar_out (self, exponent): exponent 0 -> 1, 1 -> x, 0.5 -> sqrt(x),
//                    -0.5 -> 1 / sqrt(x), -1 -> 1 / x, 2 -> x * x, 3 -> x * x * x,
//                    -2 -> 1 / (x * x); others pow(x, float(exponent)) in double
#include <cmath>

#include "elementwise.h"
#include "transcendental.h"

namespace kiln::runtime::kernels {

namespace {

// float32 constants as exact bits (elementwise.py has the same).
constexpr float kSqrt1_2 = 0x1.6a09e6p-1f;    // float(M_SQRT1_2)
constexpr float kGeluBeta = 0x1.988454p-1f;   // float(M_SQRT2 * M_2_SQRTPI * 0.5)
constexpr float kGeluKappa = 0x1.6e4e26p-5f;  // float(0.044715)

Result<float> float_arg(const KernelArgs& args, size_t i) {
  KILN_TRY(double d, number_arg(args, i));
  return static_cast<float>(d);
}

float rsqrt(float x) { return 1.0f / std::sqrt(x); }

}  // namespace

Status hardsigmoid_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return clamp_nan(x + 3.0f, 0.0f, 6.0f) / 6.0f; });
}

Status hardswish_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return x * clamp_nan(x + 3.0f, 0.0f, 6.0f) / 6.0f; });
}

Status leaky_relu_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(float slope, float_arg(args, 1));
  return unary(args, 2, [slope](float x) { return x > 0.0f ? x : x * slope; });
}

Status gelu_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(StringView approximate, string_arg(args, 1));
  if (approximate == StringView("none")) {
    return unary(args, 2, [](float x) { return x * 0.5f * (1.0f + kiln_erff(x * kSqrt1_2)); });
  }
  if (approximate == StringView("tanh")) {
    return unary(args, 2, [](float x) {
      float inner = kGeluBeta * (x + kGeluKappa * (x * x * x));
      return 0.5f * x * (1.0f + kiln_tanhf(inner));
    });
  }
  return unsupported(1);
}

Status silu_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return x / (1.0f + kiln_expf(-x)); });
}

Status elu_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 4));
  KILN_TRY(float alpha, float_arg(args, 1));
  KILN_TRY(float scale, float_arg(args, 2));
  KILN_TRY(float input_scale, float_arg(args, 3));
  const float negcoef = alpha * scale;
  return unary(args, 4, [=](float x) { return x <= 0.0f ? kiln_expm1f(x * input_scale) * negcoef : x * scale; });
}

Status softplus_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(float beta, float_arg(args, 1));
  KILN_TRY(float threshold, float_arg(args, 2));
  return unary(args, 3, [=](float x) {
    float t = x * beta;
    return t > threshold ? x : kiln_log1p_expf(t) / beta;
  });
}

Status mish_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return x * kiln_tanh_log1p_expf(x); });
}

Status sqrt_out(KernelArgs& args) {
  return unary(args, 1, [](float x) { return std::sqrt(x); });
}

Status rsqrt_out(KernelArgs& args) { return unary(args, 1, rsqrt); }

Status sin_out(KernelArgs& args) { return unary(args, 1, kiln_sinf); }

Status cos_out(KernelArgs& args) { return unary(args, 1, kiln_cosf); }

Status erf_out(KernelArgs& args) { return unary(args, 1, kiln_erff); }

Status abs_out(KernelArgs& args) {
  return numeric_map(args, 1, [](auto x) -> decltype(x) {
    if constexpr (std::is_floating_point_v<decltype(x)>)
      return std::fabs(x);
    else
      return x < 0 ? wrapping_sub<decltype(x)>(0, x) : x;
  });
}

Status neg_out(KernelArgs& args) {
  return numeric_map(args, 1, [](auto x) -> decltype(x) {
    if constexpr (std::is_floating_point_v<decltype(x)>)
      return -x;
    else
      return wrapping_sub<decltype(x)>(0, x);
  });
}

Status floor_out(KernelArgs& args) {
  return numeric_map(args, 1, [](auto x) { return on_floats(x, [](float v) { return std::floor(v); }); });
}

Status ceil_out(KernelArgs& args) {
  return numeric_map(args, 1, [](auto x) { return on_floats(x, [](float v) { return std::ceil(v); }); });
}

Status trunc_out(KernelArgs& args) {
  return numeric_map(args, 1, [](auto x) { return on_floats(x, [](float v) { return std::trunc(v); }); });
}

Status round_out(KernelArgs& args) {  // the default rounding mode: to nearest, ties to even
  return numeric_map(args, 1, [](auto x) { return on_floats(x, [](float v) { return std::nearbyint(v); }); });
}

Status sign_out(KernelArgs& args) {
  return numeric_map<true>(args, 1, [](auto x) { return static_cast<decltype(x)>((x > 0) - (x < 0)); });
}

Status pow_tensor_scalar_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(double e, number_arg(args, 1));
  if (e == 0.0) return unary(args, 2, [](float) { return 1.0f; });
  if (e == 1.0) return unary(args, 2, [](float x) { return x; });
  if (e == 0.5) return unary(args, 2, [](float x) { return std::sqrt(x); });
  if (e == -0.5) return unary(args, 2, rsqrt);
  if (e == -1.0) return unary(args, 2, [](float x) { return 1.0f / x; });
  if (e == 2.0) return unary(args, 2, [](float x) { return x * x; });
  if (e == 3.0) return unary(args, 2, [](float x) { return x * x * x; });
  if (e == -2.0) return unary(args, 2, [](float x) { return 1.0f / (x * x); });
  const float exponent = static_cast<float>(e);
  return unary(args, 2, [exponent](float x) { return kiln_powf(x, exponent); });
}

}  // namespace kiln::runtime::kernels
