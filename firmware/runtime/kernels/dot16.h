// The int16 dot product of the s16 batch matmul (internal), in three code paths as dot.h's:
//   Helium (Cortex-M55, M85): eight int16 products an instruction (VMLALDAVA), the tail predicated;
//   DSP (Cortex-M4, M7, M33): two int16 products an SMLALD;
//   plain C everywhere else (and on the host).
// The sum is exact in int64 (CMSIS-NN's s16 accumulator) for n below 2^33, so the paths agree.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>
#elif defined(__ARM_FEATURE_SIMD32) && __ARM_FEATURE_SIMD32
#include <arm_acle.h>
#endif

namespace kiln::runtime::kernels {

inline int64_t dot_s16_plain(const int16_t* x, const int16_t* w, int64_t from, int64_t n, int64_t sum) {
  for (int64_t i = from; i < n; ++i) sum += static_cast<int32_t>(x[i]) * w[i];
  return sum;
}

// sum_i x[i] w[i] over n pairs of int16.
inline int64_t dot_s16(const int16_t* x, const int16_t* w, int64_t n) {
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
  int64_t sum = 0;
  for (int64_t i = 0; i < n; i += 8) {
    const mve_pred16_t lanes = vctp16q(static_cast<uint32_t>(n - i < 8 ? n - i : 8));
    sum = vmlaldavaq_s16(sum, vldrhq_z_s16(x + i, lanes), vldrhq_z_s16(w + i, lanes));  // inactive lanes read 0
  }
  return sum;
#elif defined(__ARM_FEATURE_SIMD32) && __ARM_FEATURE_SIMD32
  int64_t sum = 0;  // SMLALD's 64-bit accumulator
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    int16x2_t a, b;
    std::memcpy(&a, x + i, 4);
    std::memcpy(&b, w + i, 4);
    sum = __smlald(a, b, sum);
  }
  return dot_s16_plain(x, w, i, n, sum);
#else
  return dot_s16_plain(x, w, 0, n, 0);
#endif
}

}  // namespace kiln::runtime::kernels
