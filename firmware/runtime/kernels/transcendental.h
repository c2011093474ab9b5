// Float32 transcendental functions for the kernels (internal): evaluated in double
// precision and rounded once to float32, which gives the correctly rounded result
// for all but vanishingly rare inputs and does not depend on the C library's
// float32 approximations.
#pragma once

#include <cmath>

namespace kiln::runtime::kernels {

inline float kiln_expf(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
inline float kiln_logf(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
inline float kiln_tanhf(float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); }

}  // namespace kiln::runtime::kernels
