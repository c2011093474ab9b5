// CMSIS-NN's fixed-point primitives for the integer cortex_m kernels (internal), as
// kiln.program.kernels.integer defines them. Values are int32; where CMSIS-NN's C leaves an
// overflow to the machine (a requantize's left shift, the high multiply's result) they wrap
// (two's complement), and intermediate products are int64, so nothing here is undefined.
#pragma once

#include <cstdint>

namespace kiln::runtime::kernels::fixed {

constexpr int32_t kInt32Min = INT32_MIN;
constexpr int32_t kInt32Max = INT32_MAX;

inline int32_t wrap32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

// MUL_SAT: round(a * b / 2^31), halves away from zero; INT32_MIN * INT32_MIN saturates.
inline int32_t doubling_high_mult(int32_t a, int32_t b) {
  if (a == kInt32Min && b == kInt32Min) return kInt32Max;
  const int64_t nudge = (a < 0) != (b < 0) ? 1 - (int64_t{1} << 30) : int64_t{1} << 30;
  return static_cast<int32_t>((nudge + static_cast<int64_t>(a) * b) / (int64_t{1} << 31));
}

// DIV_POW2: x / 2^exponent rounded, halves away from zero; 0 <= exponent <= 62 (beyond 31
// only softmax's bits over unit of a very long row, the natural extension).
inline int64_t divide_by_power_of_two(int64_t x, int32_t exponent) {
  const int64_t mask = (int64_t{1} << exponent) - 1;
  const int64_t remainder = x & mask;
  const int64_t result = x >> exponent;  // arithmetic: rounds towards -infinity
  const int64_t threshold = (mask >> 1) + (result < 0 ? 1 : 0);
  return result + (remainder > threshold ? 1 : 0);
}

// x * 2^shift * multiplier / 2^31 rounded once, halves up: x << max(shift, 0) wrapping to int32
// (as arm_nn_requantize's), the product exact in int64 (|product| < 2^62), divided by
// 2^(31 + max(-shift, 0)) and wrapped to int32; -31 <= shift <= 31. arm_nn_requantize rounds
// twice (its high multiply, then DIV_POW2); kiln.program.kernels.integer.requantize says why not.
inline int32_t requantize(int32_t x, int32_t multiplier, int32_t shift) {
  const auto shifted = static_cast<int32_t>(static_cast<uint32_t>(x) << static_cast<uint32_t>(shift > 0 ? shift : 0));
  const int32_t exponent = 31 + (shift < 0 ? -shift : 0);
  return wrap32((static_cast<int64_t>(shifted) * multiplier + (int64_t{1} << (exponent - 1))) >> exponent);
}

// arm_nn_requantize_s64 with REDUCE_MULTIPLIER (CMSIS-NN's s16 kernels): x times the multiplier
// as a Q15, shifted right by 14 - shift and wrapped to int32, then halved rounding up; |x| < 2^47,
// -31 <= shift <= 14.
inline int32_t requantize_s64(int64_t x, int32_t multiplier, int32_t shift) {
  const int64_t reduced = multiplier < 0x7FFF0000 ? (static_cast<int64_t>(multiplier) + (1 << 15)) >> 16 : 0x7FFF;
  const int32_t high = wrap32((x * reduced) >> (14 - shift));
  return wrap32(static_cast<int64_t>(high) + 1) >> 1;  // the int32 sum wraps, as CMSIS-NN's on the machine
}

// MUL_POW2: x * 2^exponent saturated to int32, 0 <= exponent <= 31.
inline int32_t mult_by_power_of_two(int32_t x, int32_t exponent) {
  const int64_t v = static_cast<int64_t>(x) * (int64_t{1} << exponent);
  return v > kInt32Max ? kInt32Max : (v < kInt32Min ? kInt32Min : static_cast<int32_t>(v));
}

// exp(val / 2^26) in Q0.31 for val <= 0: a polynomial on [-1/4, 0), then one multiply by
// exp(-2^k / 4) per set bit k of the rest.
inline int32_t exp_on_negative_values(int32_t val) {
  constexpr int32_t kContractions[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};
  const int32_t mod_minus_quarter = (val & ((1 << 24) - 1)) - (1 << 24);
  const int32_t remainder = static_cast<int32_t>(static_cast<int64_t>(mod_minus_quarter) - val);
  const int32_t x = mod_minus_quarter * 32 + (1 << 28);
  const int32_t x2 = doubling_high_mult(x, x);
  const auto cubic =
      static_cast<int32_t>(divide_by_power_of_two(doubling_high_mult(x2, x2), 2) + doubling_high_mult(x2, x));
  const auto poly = static_cast<int32_t>(x + divide_by_power_of_two(doubling_high_mult(cubic, 715827883) + x2, 1));
  int32_t result = 1895147668 + doubling_high_mult(1895147668, poly);
  for (int k = 0; k < 7; ++k) {
    if (remainder & (1 << (24 + k))) result = doubling_high_mult(result, kContractions[k]);
  }
  return val == 0 ? kInt32Max : result;
}

// 1 / (1 + val / 2^31) in Q0.31 (saturating at 1) for 0 <= val: three Newton steps.
inline int32_t one_over_one_plus_x(int32_t val) {
  const int64_t total = static_cast<int64_t>(val) + kInt32Max;
  const auto half = static_cast<int32_t>((total + (total >= 0 ? 1 : -1)) / 2);
  int32_t x = 1515870810 + doubling_high_mult(half, -1010580540);
  for (int step = 0; step < 3; ++step) {
    x += mult_by_power_of_two(doubling_high_mult(x, (1 << 29) - doubling_high_mult(half, x)), 2);
  }
  return mult_by_power_of_two(x, 1);
}

// Leading zero bits of v (32 for 0).
inline int32_t count_leading_zeros(uint32_t v) { return v == 0 ? 32 : __builtin_clz(v); }

}  // namespace kiln::runtime::kernels::fixed
