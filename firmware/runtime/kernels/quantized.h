// Argument helpers shared by the integer cortex_m kernels (internal): kernels/quantized*.cpp.
#pragma once

#include "dot.h"
#include "fixed_point.h"
#include "util.h"

namespace kiln::runtime::kernels {

// An Int argument within [lo, hi] (kKernelUnsupported otherwise).
Result<int64_t> ranged_int(const KernelArgs& args, size_t i, int64_t lo, int64_t hi);

// The activation range [low, high] of positions i and j: int8 values, low <= high.
Status activation_range(const KernelArgs& args, size_t low_at, size_t high_at, int32_t range[2]);

// An int8 out tensor (position n) of exactly `sizes`, contiguous unless `any_order`.
Result<Tensor*> int8_output(const KernelArgs& args, size_t n, const int64_t* sizes, size_t dim, bool any_order = false);

// IntList multipliers and shifts (positions at, at + 1) of 1 or `channels` items, each
// multiplier an int32 and each shift within [-31, 14] (requantize_s64's range): the s16 kernels'.
Status s64_requantization(const KernelArgs& args, size_t at, int64_t channels);

// The int16 activation range [low, high] of positions i and j: low <= high.
Status activation_range_s16(const KernelArgs& args, size_t low_at, size_t high_at, int32_t range[2]);

// An average pool's kernel_size, stride, padding (at most half the kernel) and ceil_mode at
// positions 1 .. 4 (cortex_m::quantized_avg_pool2d and _s16), each size within 2^16.
struct PoolArgs {
  int64_t kernel[2], stride[2], padding[2];
  bool ceil_mode;
};
Status pool_args(const KernelArgs& args, PoolArgs* p);

inline const int8_t* s8(const Tensor& t) { return static_cast<const int8_t*>(t.data); }
inline int8_t* s8(Tensor& t) { return static_cast<int8_t*>(t.data); }

inline int8_t clamp_to(int64_t v, const int32_t range[2]) {
  return static_cast<int8_t>(v < range[0] ? range[0] : (v > range[1] ? range[1] : v));
}

// clamp_to(v + offset, range) in 32-bit arithmetic: a sum past int32 saturates, which the clamp
// (to int8 bounds) turns into the same value.
inline int8_t offset_clamp(int32_t v, int32_t offset, const int32_t range[2]) {
  int32_t sum;
  if (__builtin_add_overflow(v, offset, &sum)) sum = offset > 0 ? INT32_MAX : INT32_MIN;
  return static_cast<int8_t>(sum < range[0] ? range[0] : (sum > range[1] ? range[1] : sum));
}

// The sum of bytes p[0, n), mod 2^32.
inline int32_t byte_sum(const int8_t* p, ptrdiff_t n) {
  int32_t sum = 0;
#if defined(KILN_HELIUM)
  ptrdiff_t i = 0;
  for (; i + 16 <= n; i += 16) sum = vaddvaq_s8(sum, vld1q_s8(p + i));
  if (i < n) sum = vaddvaq_s8(sum, vldrbq_z_s8(p + i, vctp8q(static_cast<uint32_t>(n - i))));
#else
  ptrdiff_t i = 0;
#if defined(KILN_DSP)
  // Four bytes a word into two 16-bit lanes (SXTAB16), at most 127 words before the lanes
  // (|sum| <= 254 x 128 < 2^15) are added into the sum (SMUAD by 1, 1).
  while (i + 4 <= n) {
    const ptrdiff_t end = (n - i) / 4 < 127 ? i + (n - i) / 4 * 4 : i + 127 * 4;
    int16x2_t lanes = 0;
    for (; i < end; i += 4) {
      const uint32_t v = word_at(p + i);
      lanes = __sxtab16(lanes, static_cast<int8x4_t>(v));
      asm("sxtab16 %0, %0, %1, ror #8" : "+r"(lanes) : "r"(v));
    }
    sum += __smuad(lanes, 0x00010001);
  }
#endif
  for (; i < n; ++i) sum += p[i];
#endif
  return sum;
}

}  // namespace kiln::runtime::kernels
