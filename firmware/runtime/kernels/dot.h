// The int8 dot products of the integer kernels (internal; header-only so that
// tests/firmware/runtime/dot_paths/ runs each code path alone on QEMU), in three code paths:
//   Helium (Cortex-M55, M85: __ARM_FEATURE_MVE): 16 lanes an instruction, the tail predicated;
//   DSP (Cortex-M4, M7, M33: __ARM_FEATURE_SIMD32): two 16-bit products an SMLAD;
//   plain C everywhere else (and on the host), or wherever KILN_KERNELS_PLAIN is defined (the
//   firmware's CMake option of that name: the plain path on a core that has more).
// Every sum wraps to 32 bits, as CMSIS-NN's int32 accumulator; sums mod 2^32 do not depend on
// their order, so the three paths give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1) && !defined(KILN_KERNELS_PLAIN)
#define KILN_HELIUM 1
#define KILN_DOT_PATH "helium"
#include <arm_mve.h>
#elif defined(__ARM_FEATURE_SIMD32) && __ARM_FEATURE_SIMD32 && !defined(KILN_KERNELS_PLAIN)
#define KILN_DSP 1
#define KILN_DOT_PATH "dsp"
#include <arm_acle.h>
#else
#define KILN_DOT_PATH "plain"
#endif

namespace kiln::runtime::kernels {

#if defined(KILN_DSP)
// Bytes 0 and 2 (and, of the word rotated by 8, bytes 1 and 3) of a word, each widened to int16.
inline int16x2_t even_bytes(uint32_t v) { return __sxtb16(static_cast<int8x4_t>(v)); }
inline int16x2_t odd_bytes(uint32_t v) {
  int16x2_t r;  // SXTB16's own rotation (GCC 12 rotates first with a separate instruction)
  asm("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
  return r;
}
inline uint32_t word_at(const int8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
#endif

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
#if defined(KILN_HELIUM)
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
#elif defined(KILN_DSP)
  // Four int8 a word: SXTB16 widens bytes 0 and 2 (and, rotated by 8, 1 and 3) to two int16,
  // SMLAD adds both products to a 32-bit sum (wrapping; it only sets the Q flag).
  constexpr int16x2_t kOnes = 0x00010001;
  int32_t xw = 0, sx = 0, sw = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32_t xv = word_at(x + i), wv = word_at(w + i);
    const int16x2_t x02 = even_bytes(xv), x13 = odd_bytes(xv);
    const int16x2_t w02 = even_bytes(wv), w13 = odd_bytes(wv);
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

// acc[j] = sum over i < n of x[i] w[j w_stride + i] for each of R (1 or 4) weight rows, mod 2^32:
// the rows share each load of x.
template <int R>
inline void dot_rows(const int8_t* x, const int8_t* w, ptrdiff_t w_stride, ptrdiff_t n, int32_t acc[R]) {
  static_assert(R == 1 || R == 4, "one row or four");
  const int8_t* w0 = w;
  const int8_t* w1 = w + (R > 1 ? w_stride : 0);
  const int8_t* w2 = w + (R > 1 ? 2 * w_stride : 0);
  const int8_t* w3 = w + (R > 1 ? 3 * w_stride : 0);
  ptrdiff_t i = 0;
#if defined(KILN_HELIUM)
  int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (; i + 16 <= n; i += 16) {  // whole vectors unpredicated, then the tail's (inactive lanes read as 0)
    const int8x16_t xv = vld1q_s8(x + i);
    s0 = vmladavaq_s8(s0, xv, vld1q_s8(w0 + i));
    if constexpr (R > 1) {
      s1 = vmladavaq_s8(s1, xv, vld1q_s8(w1 + i)), s2 = vmladavaq_s8(s2, xv, vld1q_s8(w2 + i));
      s3 = vmladavaq_s8(s3, xv, vld1q_s8(w3 + i));
    }
  }
  if (i < n) {
    const mve_pred16_t lanes = vctp8q(static_cast<uint32_t>(n - i));
    const int8x16_t xv = vldrbq_z_s8(x + i, lanes);
    s0 = vmladavaq_s8(s0, xv, vldrbq_z_s8(w0 + i, lanes));
    if constexpr (R > 1) {
      s1 = vmladavaq_s8(s1, xv, vldrbq_z_s8(w1 + i, lanes)), s2 = vmladavaq_s8(s2, xv, vldrbq_z_s8(w2 + i, lanes));
      s3 = vmladavaq_s8(s3, xv, vldrbq_z_s8(w3 + i, lanes));
    }
  }
  const int32_t sums[4] = {s0, s1, s2, s3};
#else
  uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#if defined(KILN_DSP)
  for (; i + 4 <= n; i += 4) {
    const uint32_t xv = word_at(x + i);
    const int16x2_t x02 = even_bytes(xv), x13 = odd_bytes(xv);
    const auto mac = [&](uint32_t sum, const int8_t* row) {
      const uint32_t wv = word_at(row + i);
      return static_cast<uint32_t>(
          __smlad(x13, odd_bytes(wv), __smlad(x02, even_bytes(wv), static_cast<int32_t>(sum))));
    };
    s0 = mac(s0, w0);
    if constexpr (R > 1) s1 = mac(s1, w1), s2 = mac(s2, w2), s3 = mac(s3, w3);
  }
#endif
  for (; i < n; ++i) {
    const int32_t xi = x[i];
    s0 += static_cast<uint32_t>(xi * w0[i]);
    if constexpr (R > 1) {
      s1 += static_cast<uint32_t>(xi * w1[i]), s2 += static_cast<uint32_t>(xi * w2[i]);
      s3 += static_cast<uint32_t>(xi * w3[i]);
    }
  }
  const int32_t sums[4] = {static_cast<int32_t>(s0), static_cast<int32_t>(s1), static_cast<int32_t>(s2),
                           static_cast<int32_t>(s3)};
#endif
  for (int j = 0; j < R; ++j) acc[j] = sums[j];
}

}  // namespace kiln::runtime::kernels
