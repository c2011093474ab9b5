// cortex_m::quantized_linear.out (input, weights, bias?, kernel_sum?, input_offset, filter_offset,
//   output_offset, requantize_multipliers, requantize_shifts, activation_max, activation_min,
//   out): weights [out, in]; sum (x + input_offset) (w + filter_offset) + bias, or with
//   kernel_sum (bias folded in, ExecuTorch's MVE form) sum x w + filter_offset sum x +
//   kernel_sum; one multiplier and shift (IntLists), or one per output feature.
// As kiln.program.kernels.integer computes it (CMSIS-NN's arithmetic): each sum wraps to int32
// before the requantize; dot.h's paths (Helium, DSP, plain C) give the same bits.
#include <cstddef>

#include "requantize.h"

namespace kiln::runtime::kernels {

namespace {

// One row of the linear kernel: out_features outputs of x against weight rows of `in`, 4 rows a
// pass (then 1). constant(o): what each sum adds (bias and offsets, mod 2^32).
template <typename Constant>
void linear_row(const int8_t* x, const int8_t* w, int64_t in, int64_t out_features, const OutputStage& out,
                Constant constant, int8_t* y) {
  const auto n = static_cast<ptrdiff_t>(in);
  int64_t o = 0;
  for (; o + 4 <= out_features; o += 4) {
    int32_t acc[4];
    dot_rows<4>(x, w + o * n, n, n, acc);
    const int32_t k[4] = {constant(o), constant(o + 1), constant(o + 2), constant(o + 3)};
#if defined(KILN_HELIUM)
    if (out.q->no_min_multiplier) {
      vstrbq_s32(y + o, lanes_of(*out.q, o).apply(vaddq_s32(vld1q_s32(acc), vld1q_s32(k)), out));
      continue;
    }
#endif
    for (int j = 0; j < 4; ++j) {
      y[o + j] = out.scalar(static_cast<int32_t>(static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(k[j])), o + j);
    }
  }
  for (; o < out_features; ++o) {
    int32_t acc[1];
    dot_rows<1>(x, w + o * n, n, n, acc);
    y[o] = out.scalar(static_cast<int32_t>(static_cast<uint32_t>(acc[0]) + static_cast<uint32_t>(constant(o))), o);
  }
}

}  // namespace

Status cortex_m_quantized_linear_out(KernelArgs& args) {
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
  KILN_TRY(Requantization q, list_requantization(args, 7, out_features));
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
      linear_row(
          row, ws, in, out_features, stage,
          [&](int64_t o) { return static_cast<int32_t>(row_term + static_cast<uint32_t>(kernel_sum[o])); },
          y + r * out_features);
    } else {
      const uint32_t fixed_term = row_term + static_cast<uint32_t>(in) * a * b;
      linear_row(
          row, ws, in, out_features, stage,
          [&](int64_t o) {
            const uint32_t start = bias != nullptr ? static_cast<uint32_t>(bias[o]) : 0u;
            return static_cast<int32_t>(fixed_term + start + a * static_cast<uint32_t>(byte_sum(ws + o * in, n)));
          },
          y + r * out_features);
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
