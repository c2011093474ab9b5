// cortex_m::quantized_linear.out (input, weights, bias?, kernel_sum?, input_offset, filter_offset,
//   output_offset, requantize_multipliers, requantize_shifts, activation_max, activation_min,
//   out): weights [out, in]; sum (x + input_offset) (w + filter_offset) + bias, or with
//   kernel_sum (bias folded in, ExecuTorch's MVE form) sum x w + filter_offset sum x +
//   kernel_sum; one multiplier and shift (IntLists), or one per output feature.
// cortex_m::quantized_linear_per_channel.out (kiln's): the same arguments, the multipliers and
//   shifts Int tensors of one item per output feature (constant data, not boxed list items).
// As kiln.program.kernels.integer computes it (CMSIS-NN's arithmetic): each sum wraps to int32
// before the requantize; dot.h's paths (Helium, DSP, plain C) give the same bits.
#include <cstddef>

#include "requantize.h"

namespace kiln::runtime::kernels {

namespace {

#if defined(KILN_HELIUM)
// y[o] for o < (out_features / 4) 4 of one input row x (n bytes): requantize(sum x w[o] +
// row_term + kernel_sum[o]), four rows sharing each load of x, their sums in the lanes of one
// vector requantized together; PerChannel: the multipliers and shifts are tensors (else one).
// The rows' loop is a tail-predicated low-overhead loop (WLSTP/LETP: the last piece's lanes past
// n are inactive, so they neither load nor add) in inline assembly: VMLADAVA accumulates into
// even registers only, which GCC's allocation of the intrinsics does not keep in its loop.
template <bool PerChannel>
__attribute__((noinline)) void linear_rows_helium(const int8_t* x, const int8_t* w, ptrdiff_t n, ptrdiff_t out_features,
                                                  const int32_t* kernel_sum, uint32_t row_term, const OutputStage& out,
                                                  int8_t* y) {
  const Requantization& q = *out.q;
  const LaneRequantization single(vdupq_n_s32(q.multiplier(0)), vdupq_n_s32(q.shift(0)));
  const int32x4_t term = vdupq_n_s32(static_cast<int32_t>(row_term));
  for (ptrdiff_t o = 0; o + 4 <= out_features; o += 4) {
    const int8_t *xi = x, *w0 = w + o * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    register int32_t s0 asm("r0") = 0;
    register int32_t s1 asm("r2") = 0;
    register int32_t s2 asm("r4") = 0;
    register int32_t s3 asm("r6") = 0;
    asm volatile(
        "wlstp.8 lr, %[n], 2f\n"
        "1:\n"
        "vldrb.8 q0, [%[x]], #16\n"
        "vldrb.8 q1, [%[w0]], #16\n"
        "vmladava.s8 %[s0], q0, q1\n"
        "vldrb.8 q1, [%[w1]], #16\n"
        "vmladava.s8 %[s1], q0, q1\n"
        "vldrb.8 q1, [%[w2]], #16\n"
        "vmladava.s8 %[s2], q0, q1\n"
        "vldrb.8 q1, [%[w3]], #16\n"
        "vmladava.s8 %[s3], q0, q1\n"
        "letp lr, 1b\n"
        "2:\n"
        : [s0] "+r"(s0), [s1] "+r"(s1), [s2] "+r"(s2), [s3] "+r"(s3), [x] "+r"(xi), [w0] "+r"(w0), [w1] "+r"(w1),
          [w2] "+r"(w2), [w3] "+r"(w3)
        : [n] "r"(n)
        : "q0", "q1", "lr", "memory");
    int32x4_t sums = vsetq_lane_s32(s3, vsetq_lane_s32(s2, vsetq_lane_s32(s1, vdupq_n_s32(s0), 1), 2), 3);
    sums = vaddq_s32(vaddq_s32(sums, vld1q_s32(kernel_sum + o)), term);
    if constexpr (PerChannel) {
      const LaneRequantization lanes(vld1q_s32(q.tensor_multipliers + o), vld1q_s32(q.tensor_shifts + o));
      vstrbq_s32(y + o, lanes.apply(sums, out));
    } else {
      vstrbq_s32(y + o, single.apply(sums, out));
    }
  }
}

#else
#if defined(KILN_DSP)
constexpr ptrdiff_t kWidenedMax = 1024;  // inputs widened once per row (on the stack: 2 bytes each)
#else
constexpr ptrdiff_t kWidenedMax = PTRDIFF_MAX;  // plain C widens nothing
#endif

// Sums of 4 weight rows (row r at w + r n) against x (n bytes), into acc[4], mod 2^32. DSP:
// pairs[2k], pairs[2k + 1] hold x's word k widened (SXTB16 of bytes 0, 2 and of 1, 3: the two
// int16 lanes of each), so each row's word costs one load, two SXTB16 and two SMLAD; plain C:
// each x byte loaded once for the 4 rows.
inline void dot4_scalar(const int8_t* x, [[maybe_unused]] const int32_t* pairs, const int8_t* w, ptrdiff_t n,
                        uint32_t acc[4]) {
  uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  ptrdiff_t i = 0;
#if defined(KILN_DSP)
  if (n >= 4) {
    // Rows 0, 1 at p0 and p0 + n, rows 2, 3 at p2 and p2 + n: thirteen registers in all, which
    // GCC's allocation of the same C (spilling the row pointers) does not reach.
    const int8_t *p0 = w, *p2 = w + 2 * n;
    const int32_t* end = pairs + (n >> 2) * 2;
    int32_t a, b, v, t;
    asm volatile(
        "1:\n"
        "ldrd %[a], %[b], [%[xp]], #8\n"
        "ldr %[v], [%[p0], %[n]]\n"
        "sxtb16 %[t], %[v]\n"
        "smlad %[s1], %[a], %[t], %[s1]\n"
        "sxtb16 %[t], %[v], ror #8\n"
        "smlad %[s1], %[b], %[t], %[s1]\n"
        "ldr %[v], [%[p0]], #4\n"
        "sxtb16 %[t], %[v]\n"
        "smlad %[s0], %[a], %[t], %[s0]\n"
        "sxtb16 %[t], %[v], ror #8\n"
        "smlad %[s0], %[b], %[t], %[s0]\n"
        "ldr %[v], [%[p2], %[n]]\n"
        "sxtb16 %[t], %[v]\n"
        "smlad %[s3], %[a], %[t], %[s3]\n"
        "sxtb16 %[t], %[v], ror #8\n"
        "smlad %[s3], %[b], %[t], %[s3]\n"
        "ldr %[v], [%[p2]], #4\n"
        "sxtb16 %[t], %[v]\n"
        "smlad %[s2], %[a], %[t], %[s2]\n"
        "sxtb16 %[t], %[v], ror #8\n"
        "smlad %[s2], %[b], %[t], %[s2]\n"
        "cmp %[xp], %[end]\n"
        "bne 1b\n"
        : [s0] "+r"(s0), [s1] "+r"(s1), [s2] "+r"(s2), [s3] "+r"(s3), [p0] "+r"(p0), [p2] "+r"(p2), [xp] "+r"(pairs),
          [a] "=&r"(a), [b] "=&r"(b), [v] "=&r"(v), [t] "=&r"(t)
        : [n] "r"(n), [end] "r"(end)
        : "cc", "memory");
  }
  i = n & ~ptrdiff_t{3};
#endif
  const int8_t *w0 = w, *w1 = w + n, *w2 = w1 + n, *w3 = w2 + n;
  for (; i < n; ++i) {
    const int32_t xi = x[i];
    s0 += static_cast<uint32_t>(xi * w0[i]), s1 += static_cast<uint32_t>(xi * w1[i]);
    s2 += static_cast<uint32_t>(xi * w2[i]), s3 += static_cast<uint32_t>(xi * w3[i]);
  }
  acc[0] = s0, acc[1] = s1, acc[2] = s2, acc[3] = s3;
}

// y[o] for o < (out_features / 4) 4 of one input row x (n bytes, at most kWidenedMax on the DSP
// path): requantize(sum x w[o] + row_term + kernel_sum[o]), 4 rows a pass. Not inlined, and not
// vectorized by GCC (its SLP of the four sums goes through the stack).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
__attribute__((noinline)) void
linear_rows_scalar(const int8_t* x, const int8_t* w, ptrdiff_t n, ptrdiff_t out_features, const int32_t* kernel_sum,
                   uint32_t row_term, const OutputStage& out, int8_t* y) {
#if defined(KILN_DSP)
  int16x2_t pairs[kWidenedMax / 2];
  for (ptrdiff_t k = 0; k < n / 4; ++k) {
    const uint32_t v = word_at(x + 4 * k);
    pairs[2 * k] = even_bytes(v), pairs[2 * k + 1] = odd_bytes(v);
  }
#else
  const int32_t* pairs = nullptr;
#endif
  for (ptrdiff_t o = 0; o + 4 <= out_features; o += 4) {
    uint32_t acc[4];
    dot4_scalar(x, pairs, w + o * n, n, acc);
    for (int j = 0; j < 4; ++j) {
      const uint32_t sum = acc[j] + static_cast<uint32_t>(kernel_sum[o + j]) + row_term;
      y[o + j] = out.scalar(static_cast<int32_t>(sum), o + j);
    }
  }
}
#endif

// y[o] for o < out_features of one input row x (n bytes) with kernel sums (ExecuTorch's MVE
// form): requantize(sum x w[o] + row_term + kernel_sum[o]).
void linear_row(const int8_t* x, const int8_t* w, ptrdiff_t n, int64_t out_features, const int32_t* kernel_sum,
                uint32_t row_term, const OutputStage& out, int8_t* y) {
  int64_t o = 0;
#if defined(KILN_HELIUM)
  const Requantization& q = *out.q;
  if (q.no_min_multiplier && (q.tensor_multipliers != nullptr || !q.per_channel)) {
    const auto features = static_cast<ptrdiff_t>(out_features);
    if (q.tensor_multipliers != nullptr) {
      linear_rows_helium<true>(x, w, n, features, kernel_sum, row_term, out, y);
    } else {
      linear_rows_helium<false>(x, w, n, features, kernel_sum, row_term, out, y);
    }
    o = out_features / 4 * 4;
  }
#else
  if (n <= kWidenedMax) {
    linear_rows_scalar(x, w, n, static_cast<ptrdiff_t>(out_features), kernel_sum, row_term, out, y);
    o = out_features / 4 * 4;
  }
#endif
  for (; o + 4 <= out_features; o += 4) {
    int32_t acc[4];
    dot_rows<4>(x, w + o * n, n, n, acc);
    for (int j = 0; j < 4; ++j) {
      const uint32_t sum = static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(kernel_sum[o + j]) + row_term;
      y[o + j] = out.scalar(static_cast<int32_t>(sum), o + j);
    }
  }
  for (; o < out_features; ++o) {
    int32_t acc[1];
    dot_rows<1>(x, w + o * n, n, n, acc);
    const uint32_t sum = static_cast<uint32_t>(acc[0]) + static_cast<uint32_t>(kernel_sum[o]) + row_term;
    y[o] = out.scalar(static_cast<int32_t>(sum), o);
  }
}

// Without kernel sums: constant(o) = bias + a sum w[o] + n a b (mod 2^32), the weights summed
// on each call; rows of 4 share each load of x (then 1).
void linear_row_summing(const int8_t* x, const int8_t* w, ptrdiff_t n, int64_t out_features, const int32_t* bias,
                        uint32_t a, uint32_t fixed_term, const OutputStage& out, int8_t* y) {
  const auto constant = [&](int64_t o) {
    const uint32_t start = bias != nullptr ? static_cast<uint32_t>(bias[o]) : 0u;
    return fixed_term + start + a * static_cast<uint32_t>(byte_sum(w + o * n, n));
  };
  int64_t o = 0;
  for (; o + 4 <= out_features; o += 4) {
    int32_t acc[4];
    dot_rows<4>(x, w + o * n, n, n, acc);
    for (int j = 0; j < 4; ++j) y[o + j] = out.scalar(static_cast<int32_t>(acc[j] + constant(o + j)), o + j);
  }
  for (; o < out_features; ++o) {
    int32_t acc[1];
    dot_rows<1>(x, w + o * n, n, n, acc);
    y[o] = out.scalar(static_cast<int32_t>(static_cast<uint32_t>(acc[0]) + constant(o)), o);
  }
}

// Both operators: `tensors` whether the multipliers and shifts are Int tensors (kiln's form).
Status quantized_linear(KernelArgs& args, bool tensors) {
  KILN_CHECK(expect_arity(args, 11));
  KILN_TRY(const Tensor* x, input_tensor(args, 0, ScalarType::kChar));
  KILN_TRY(const Tensor* w, input_tensor(args, 1, ScalarType::kChar));
  if (w->dim != 2) return shape_mismatch(1, w->dim);
  if (x->dim < 1 || x->sizes[x->dim - 1] != w->sizes[1]) return shape_mismatch(0);
  const int64_t in = w->sizes[1], out_features = w->sizes[0];
  KILN_TRY(const int32_t* bias, optional_channels(args, 2, out_features));
  KILN_TRY(const int32_t* kernel_sum, optional_channels(args, 3, out_features));
  KILN_TRY(int64_t input_offset, ranged_int(args, 4, -kMaxParam, kMaxParam));
  KILN_TRY(int64_t filter_offset, ranged_int(args, 5, -kMaxParam, kMaxParam));
  KILN_TRY(int64_t output_offset, ranged_int(args, 6, INT32_MIN, INT32_MAX));
  Requantization q;
  if (tensors) {
    KILN_TRY(q, tensor_requantization(args, 7, out_features));
  } else {
    KILN_TRY(q, list_requantization(args, 7, out_features));
  }
  int32_t range[2];
  KILN_CHECK(activation_range(args, 10, 9, range));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d + 1 < x->dim; ++d) sizes[d] = x->sizes[d];
  sizes[x->dim - 1] = out_features;
  KILN_TRY(Tensor * out, int8_output(args, 11, sizes, x->dim));
  KILN_TRY(int64_t rows, size_product(*x, 0, x->dim - 1, 0));
  const int8_t *xs = s8(*x), *ws = s8(*w);
  int8_t* y = s8(*out);
  const OutputStage stage{&q, static_cast<int32_t>(output_offset), {range[0], range[1]}};
  // sum (x + a)(w + b) + bias = sum x w + b sum x + a sum w + n a b + bias, all mod 2^32; with
  // kernel_sum, sum x w + b sum x + kernel_sum.
  const auto a = static_cast<uint32_t>(input_offset), b = static_cast<uint32_t>(filter_offset);
  const auto n = static_cast<ptrdiff_t>(in);
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = xs + r * in;
    const uint32_t row_term = b != 0 ? b * static_cast<uint32_t>(byte_sum(row, n)) : 0u;
    if (kernel_sum != nullptr) {
      linear_row(row, ws, n, out_features, kernel_sum, row_term, stage, y + r * out_features);
    } else {
      const uint32_t fixed_term = row_term + static_cast<uint32_t>(in) * a * b;
      linear_row_summing(row, ws, n, out_features, bias, a, fixed_term, stage, y + r * out_features);
    }
  }
  return {};
}

}  // namespace

Status cortex_m_quantized_linear_out(KernelArgs& args) { return quantized_linear(args, false); }

Status cortex_m_quantized_linear_per_channel_out(KernelArgs& args) { return quantized_linear(args, true); }

}  // namespace kiln::runtime::kernels
