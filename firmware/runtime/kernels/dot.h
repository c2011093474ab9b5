// The int8 dot product of the integer linear kernel (internal; header-only so that
// tests/firmware/runtime/dot_paths/ runs each code path alone on QEMU), in three code paths:
//   Helium (Cortex-M55, M85: __ARM_FEATURE_MVE): 16 lanes an instruction, the tail predicated;
//   DSP (Cortex-M4, M7, M33: __ARM_FEATURE_SIMD32): two 16-bit products an SMLAD;
//   plain C everywhere else (and on the host).
// Every sum wraps to 32 bits, as CMSIS-NN's int32 accumulator; sums mod 2^32 do not depend on
// their order, so the three paths give the same bits.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#define KILN_DOT_PATH "helium"
#include <arm_mve.h>
#elif defined(__ARM_FEATURE_SIMD32) && __ARM_FEATURE_SIMD32
#define KILN_DOT_PATH "dsp"
#include <arm_acle.h>
#else
#define KILN_DOT_PATH "plain"
#endif

namespace kiln::runtime::kernels {

// Sums over n pairs of int8 x[i], w[i], each mod 2^32: of x[i] w[i], of x[i], of w[i].
struct DotSums {
  uint32_t xw, x, w;
};

inline DotSums dot_sums_plain(const int8_t* x, const int8_t* w, int64_t from, int64_t n, DotSums s) {
  for (int64_t i = from; i < n; ++i) {
    s.xw += static_cast<uint32_t>(x[i] * w[i]);
    s.x += static_cast<uint32_t>(x[i]);
    s.w += static_cast<uint32_t>(w[i]);
  }
  return s;
}

inline DotSums dot_sums(const int8_t* x, const int8_t* w, int64_t n) {
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
  int32_t xw = 0, sx = 0, sw = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const mve_pred16_t lanes = vctp8q(static_cast<uint32_t>(n - i < 16 ? n - i : 16));
    const int8x16_t a = vldrbq_z_s8(x + i, lanes);  // inactive lanes read as 0
    const int8x16_t b = vldrbq_z_s8(w + i, lanes);
    xw = vmladavaq_s8(xw, a, b);
    sx = vaddvaq_s8(sx, a);
    sw = vaddvaq_s8(sw, b);
  }
  return DotSums{static_cast<uint32_t>(xw), static_cast<uint32_t>(sx), static_cast<uint32_t>(sw)};
#elif defined(__ARM_FEATURE_SIMD32) && __ARM_FEATURE_SIMD32
  // Four int8 a word: SXTB16 widens bytes 0 and 2 (and, rotated by 8, 1 and 3) to two int16,
  // SMLAD adds both products to a 32-bit sum (wrapping; it only sets the Q flag).
  constexpr int16x2_t kOnes = 0x00010001;
  int32_t xw = 0, sx = 0, sw = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint32_t xv, wv;
    std::memcpy(&xv, x + i, 4);
    std::memcpy(&wv, w + i, 4);
    const auto ror8 = [](uint32_t v) { return static_cast<int8x4_t>((v >> 8) | (v << 24)); };
    const int16x2_t x02 = __sxtb16(static_cast<int8x4_t>(xv)), x13 = __sxtb16(ror8(xv));
    const int16x2_t w02 = __sxtb16(static_cast<int8x4_t>(wv)), w13 = __sxtb16(ror8(wv));
    xw = __smlad(x13, w13, __smlad(x02, w02, xw));
    sx = __smlad(x13, kOnes, __smlad(x02, kOnes, sx));
    sw = __smlad(w13, kOnes, __smlad(w02, kOnes, sw));
  }
  const DotSums s{static_cast<uint32_t>(xw), static_cast<uint32_t>(sx), static_cast<uint32_t>(sw)};
  return dot_sums_plain(x, w, i, n, s);
#else
  return dot_sums_plain(x, w, 0, n, DotSums{0, 0, 0});
#endif
}

}  // namespace kiln::runtime::kernels
