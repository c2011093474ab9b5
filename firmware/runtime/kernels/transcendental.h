// Float32 transcendental functions for the kernels (internal): evaluated in double
// precision and rounded once to float32, which gives the correctly rounded result
// for all but vanishingly rare inputs and does not depend on the C library's
// float32 approximations. kiln.program.kernels evaluates the same functions in float64
// (core.in_float64, elementwise.py) and rounds the same way.
#pragma once

#include <cmath>

namespace kiln::runtime::kernels {

inline double widen(float x) { return static_cast<double>(x); }

inline float kiln_expf(float x) { return static_cast<float>(std::exp(widen(x))); }
inline float kiln_logf(float x) { return static_cast<float>(std::log(widen(x))); }
inline float kiln_tanhf(float x) { return static_cast<float>(std::tanh(widen(x))); }
inline float kiln_expm1f(float x) { return static_cast<float>(std::expm1(widen(x))); }
inline float kiln_erff(float x) { return static_cast<float>(std::erf(widen(x))); }
inline float kiln_sinf(float x) { return static_cast<float>(std::sin(widen(x))); }
inline float kiln_cosf(float x) { return static_cast<float>(std::cos(widen(x))); }
inline float kiln_powf(float x, float e) { return static_cast<float>(std::pow(widen(x), widen(e))); }
// log1p(exp(x)) (softplus's core), and tanh(log1p(exp(x))) (mish's), each rounded once.
inline float kiln_log1p_expf(float x) { return static_cast<float>(std::log1p(std::exp(widen(x)))); }
inline float kiln_tanh_log1p_expf(float x) { return static_cast<float>(std::tanh(std::log1p(std::exp(widen(x))))); }

}  // namespace kiln::runtime::kernels
