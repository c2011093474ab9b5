// cortex_m::quantize_per_tensor.out / cortex_m::dequantize_per_tensor.out
// (input, scale, zero_point, quant_min, quant_max, dtype, out), as kiln.program.kernels
// computes them in float32:
//   quantize:   clip(rint(x * (1 / scale)) + zero_point, qmin, qmax), NaN -> 0 before
//               the clip (numpy leaves NaN's integer value unspecified)
//   dequantize: float(int32(q) - zero_point) * scale
// elementwise, so in either DimOrder, the out tensor in the input's;
// quantized_decomposed::dequantize_per_channel.out (input, scales, zero_points?, axis,
// quant_min, quant_max, dtype, out_dtype?, out), as ExecuTorch's Arm flow calls it for
// its weights: float(q - zero_points[c]) * scales[c], c the index along `axis`, the
// difference in int64 for Long zero points, else in int32 (wrapping); no zero points
// means 0.
#include <cmath>
#include <cstring>

#include "kiln/runtime/try.h"
#include "util.h"

namespace kiln::runtime::kernels {

namespace {

constexpr size_t kArity = 6;

bool is_integer_type(ScalarType t) {
  return t == ScalarType::kChar || t == ScalarType::kByte || t == ScalarType::kShort || t == ScalarType::kInt;
}

struct QuantParams {
  float scale;
  float zero_point;
  int64_t qmin;
  int64_t qmax;
};

Result<QuantParams> quant_params(const KernelArgs& args) {
  KILN_TRY(double scale, number_arg(args, 1));
  KILN_TRY(int64_t zero_point, int_arg(args, 2));
  KILN_TRY(int64_t qmin, int_arg(args, 3));
  KILN_TRY(int64_t qmax, int_arg(args, 4));
  if (qmin > qmax || qmin < INT32_MIN || qmax > INT32_MAX) return unsupported(3);
  if (zero_point < INT32_MIN || zero_point > INT32_MAX) return unsupported(2);
  return QuantParams{static_cast<float>(scale), static_cast<float>(zero_point), qmin, qmax};
}

// The dtype argument (at `position`) names the integer tensor's type.
Status check_dtype(const KernelArgs& args, ScalarType integer, size_t position = 5) {
  KILN_TRY(int64_t dtype, int_arg(args, position));
  if (dtype != static_cast<int64_t>(integer)) return bad_argument(position, static_cast<uint32_t>(dtype));
  return {};
}

int64_t load_integer(const Tensor& t, uint32_t i) {
  switch (t.type) {
    case ScalarType::kChar: return static_cast<const int8_t*>(t.data)[i];
    case ScalarType::kByte: return static_cast<const uint8_t*>(t.data)[i];
    case ScalarType::kShort: return static_cast<const int16_t*>(t.data)[i];
    default: return static_cast<const int32_t*>(t.data)[i];
  }
}

void store_integer(Tensor& t, uint32_t i, int64_t v) {
  switch (t.type) {
    case ScalarType::kChar: static_cast<int8_t*>(t.data)[i] = static_cast<int8_t>(v); break;
    case ScalarType::kByte: static_cast<uint8_t*>(t.data)[i] = static_cast<uint8_t>(v); break;
    case ScalarType::kShort: static_cast<int16_t*>(t.data)[i] = static_cast<int16_t>(v); break;
    default: static_cast<int32_t*>(t.data)[i] = static_cast<int32_t>(v); break;
  }
}

// Channel `c`'s zero point from an Int or Long tensor of the channel count (int32 range).
Result<int32_t> channel_zero_point(const Tensor& zp, uint32_t c, size_t position) {
  const int64_t v =
      zp.type == ScalarType::kLong ? static_cast<const int64_t*>(zp.data)[c] : static_cast<const int32_t*>(zp.data)[c];
  if (v < INT32_MIN || v > INT32_MAX) return unsupported(position, c);
  return static_cast<int32_t>(v);
}

// int32 arithmetic wraps as numpy's does.
float dequantize_one(int64_t q, int32_t zero_point, float scale) {
  auto diff = static_cast<int32_t>(static_cast<uint32_t>(q) - static_cast<uint32_t>(zero_point));
  return static_cast<float>(diff) * scale;
}

}  // namespace

Status cortex_m_quantize_per_tensor_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, kArity));
  KILN_TRY(const Tensor* in, input_tensor_any_order(args, 0, ScalarType::kFloat));
  Value& out_value = args[kArity];
  if (out_value.kind != ValueKind::kTensor || !is_integer_type(out_value.t.type)) {
    return bad_argument(kArity);
  }
  KILN_TRY(Tensor * out, output_tensor_any_order(args, kArity, out_value.t.type));
  if (!same_sizes(*in, *out)) return shape_mismatch(kArity);
  KILN_CHECK(same_order(*in, *out, kArity));
  KILN_TRY(QuantParams q, quant_params(args));
  KILN_CHECK(check_dtype(args, out->type));
  const float inverse = 1.0f / q.scale;
  const float lo = static_cast<float>(q.qmin), hi = static_cast<float>(q.qmax);
  const float* x = f32(*in);
  for (uint32_t i = 0; i < in->numel; ++i) {
    float v = std::rint(x[i] * inverse) + q.zero_point;
    if (v != v) v = 0.0f;
    v = v < lo ? lo : (v > hi ? hi : v);
    store_integer(*out, i, static_cast<int64_t>(v));
  }
  return {};
}

Status cortex_m_dequantize_per_tensor_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, kArity));
  const Value& in_value = args[0];
  if (in_value.kind != ValueKind::kTensor || !is_integer_type(in_value.t.type)) {
    return bad_argument(0);
  }
  KILN_TRY(const Tensor* in, input_tensor_any_order(args, 0, in_value.t.type));
  KILN_TRY(Tensor * out, output_tensor_any_order(args, kArity, ScalarType::kFloat));
  if (!same_sizes(*in, *out)) return shape_mismatch(kArity);
  KILN_CHECK(same_order(*in, *out, kArity));
  KILN_TRY(QuantParams q, quant_params(args));
  KILN_CHECK(check_dtype(args, in->type));
  const auto zero_point = static_cast<int32_t>(q.zero_point);
  float* y = f32(*out);
  for (uint32_t i = 0; i < in->numel; ++i) y[i] = dequantize_one(load_integer(*in, i), zero_point, q.scale);
  return {};
}

Status quantized_decomposed_dequantize_per_channel_out(KernelArgs& args) {
  constexpr size_t kChannelArity = 8;
  KILN_CHECK(expect_arity(args, kChannelArity));
  const Value& in_value = args[0];
  if (in_value.kind != ValueKind::kTensor || !is_integer_type(in_value.t.type)) return bad_argument(0);
  KILN_TRY(const Tensor* in, input_tensor(args, 0, in_value.t.type));
  KILN_TRY(Tensor * out, same_shape_output(args, kChannelArity, *in));
  KILN_TRY(int64_t axis_arg, int_arg(args, 3));
  KILN_TRY(size_t axis, dim_index(axis_arg, in->dim, 3));
  KILN_TRY(const Tensor* scales, input_tensor(args, 1, ScalarType::kFloat));
  const uint32_t channels = static_cast<uint32_t>(in->sizes[axis]);
  if (scales->numel != channels) return shape_mismatch(1, scales->numel);
  const Tensor* zero_points = nullptr;
  if (!is_null(args, 2)) {
    const Value& zp = args[2];
    if (zp.kind != ValueKind::kTensor || (zp.t.type != ScalarType::kLong && zp.t.type != ScalarType::kInt)) {
      return bad_argument(2);
    }
    KILN_TRY(zero_points, input_tensor(args, 2, zp.t.type));
    if (zero_points->numel != channels) return shape_mismatch(2, zero_points->numel);
  }
  KILN_TRY(int64_t qmin, int_arg(args, 4));
  KILN_TRY(int64_t qmax, int_arg(args, 5));
  if (qmin > qmax) return unsupported(4);
  KILN_CHECK(check_dtype(args, in->type, 6));
  if (!is_null(args, 7)) {
    KILN_TRY(int64_t out_dtype, int_arg(args, 7));
    if (out_dtype != static_cast<int64_t>(ScalarType::kFloat)) return unsupported(7, static_cast<uint32_t>(out_dtype));
  }
  // Row-major: the channel index of element i is (i / inner) % channels.
  uint32_t inner = 1;
  for (size_t d = axis + 1; d < in->dim; ++d) inner *= static_cast<uint32_t>(in->sizes[d]);
  const float* scale = f32(*scales);
  float* y = f32(*out);
  for (uint32_t i = 0; i < in->numel; ++i) {
    const uint32_t c = (i / inner) % channels;
    int32_t zero_point = 0;
    if (zero_points != nullptr) {
      KILN_TRY(zero_point, channel_zero_point(*zero_points, c, 2));
    }
    if (zero_points != nullptr && zero_points->type == ScalarType::kLong) {
      y[i] = static_cast<float>(load_integer(*in, i) - zero_point) * scale[c];
    } else {
      y[i] = dequantize_one(load_integer(*in, i), zero_point, scale[c]);
    }
  }
  return {};
}

}  // namespace kiln::runtime::kernels
