// Argument helpers shared by the integer cortex_m kernels (internal): quantized.cpp and
// quantized_conv.cpp.
#pragma once

#include "fixed_point.h"
#include "util.h"

namespace kiln::runtime::kernels {

// An Int argument within [lo, hi] (kKernelUnsupported otherwise).
Result<int64_t> ranged_int(const KernelArgs& args, size_t i, int64_t lo, int64_t hi);

// The activation range [low, high] of positions i and j: int8 values, low <= high.
Status activation_range(const KernelArgs& args, size_t low_at, size_t high_at, int32_t range[2]);

// An int8 out tensor (position n) of exactly `sizes`, contiguous unless `any_order`.
Result<Tensor*> int8_output(const KernelArgs& args, size_t n, const int64_t* sizes, size_t dim, bool any_order = false);

inline const int8_t* s8(const Tensor& t) { return static_cast<const int8_t*>(t.data); }
inline int8_t* s8(Tensor& t) { return static_cast<int8_t*>(t.data); }

inline int8_t clamp_to(int64_t v, const int32_t range[2]) {
  return static_cast<int8_t>(v < range[0] ? range[0] : (v > range[1] ? range[1] : v));
}

}  // namespace kiln::runtime::kernels
