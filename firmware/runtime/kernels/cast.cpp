// aten::_to_copy.out (self, non_blocking, memory_format = None, out): self converted to
// out's scalar type, both among float32, int8, int16, int32, int64 and bool, as
// kiln.program.kernels.movement defines it:
//   float -> integer: truncation toward zero; NaN -> 0; at or beyond the type's range
//                     (PyTorch's result is undefined there) the type's minimum or maximum
//   integer -> narrower integer: modulo 2^bits (the low bytes, little-endian)
//   integer -> float: rounded to nearest even
//   anything -> bool: != 0 (NaN is true); bool -> anything: 0 or 1
#include <cstring>

#include "kiln/runtime/try.h"
#include "movement.h"

namespace kiln::runtime::kernels {

namespace {

struct Number {
  bool real;  // f holds it; else i
  float f;
  int64_t i;
};

bool castable(ScalarType t) {
  switch (t) {
    case ScalarType::kFloat:
    case ScalarType::kChar:
    case ScalarType::kShort:
    case ScalarType::kInt:
    case ScalarType::kLong:
    case ScalarType::kBool: return true;
    default: return false;
  }
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Number read(ScalarType t, const uint8_t* p) {
  switch (t) {
    case ScalarType::kFloat: return Number{true, load<float>(p), 0};
    case ScalarType::kChar: return Number{false, 0.0f, load<int8_t>(p)};
    case ScalarType::kShort: return Number{false, 0.0f, load<int16_t>(p)};
    case ScalarType::kInt: return Number{false, 0.0f, load<int32_t>(p)};
    case ScalarType::kLong: return Number{false, 0.0f, load<int64_t>(p)};
    default: return Number{false, 0.0f, p[0] != 0 ? 1 : 0};  // kBool (castable checked)
  }
}

// `x` as an integer of `bytes` bytes: truncated, NaN 0, saturated beyond the range.
int64_t float_to_integer(float x, size_t bytes) {
  const int bits = static_cast<int>(8 * bytes);
  const float limit = bits == 64 ? 9223372036854775808.0f : static_cast<float>(int64_t{1} << (bits - 1));
  if (x != x) return 0;
  if (x >= limit) return bits == 64 ? INT64_MAX : (int64_t{1} << (bits - 1)) - 1;
  if (x < -limit) return bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1));
  return static_cast<int64_t>(x);  // |x| < 2^(bits-1): exact after truncation
}

void write(ScalarType t, uint8_t* p, const Number& n) {
  if (t == ScalarType::kFloat) {
    float f = n.real ? n.f : static_cast<float>(n.i);
    std::memcpy(p, &f, sizeof f);
    return;
  }
  if (t == ScalarType::kBool) {
    p[0] = (n.real ? n.f != 0.0f : n.i != 0) ? 1 : 0;
    return;
  }
  const size_t bytes = element_size(static_cast<int8_t>(t));
  const uint64_t v = static_cast<uint64_t>(n.real ? float_to_integer(n.f, bytes) : n.i);
  for (size_t b = 0; b < bytes; ++b) p[b] = static_cast<uint8_t>(v >> (8 * b));  // little-endian
}

}  // namespace

Status to_copy_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const Tensor* in, any_tensor(args, 0));
  KILN_TRY(bool non_blocking, bool_arg(args, 1));
  (void)non_blocking;
  if (!is_null(args, 2)) return unsupported(2);
  const Value& out_value = args[3];
  if (out_value.kind != ValueKind::kTensor) return bad_argument(3);
  KILN_TRY(Tensor * out, output_tensor(args, 3, out_value.t.type));
  if (!castable(in->type)) return unsupported(0, static_cast<uint32_t>(in->type));
  if (!castable(out->type)) return unsupported(3, static_cast<uint32_t>(out->type));
  if (!same_sizes(*in, *out)) return shape_mismatch(3);
  const size_t in_size = element_size(static_cast<int8_t>(in->type));
  const size_t out_size = element_size(static_cast<int8_t>(out->type));
  const auto* src = static_cast<const uint8_t*>(in->data);
  auto* dst = static_cast<uint8_t*>(out->data);
  for (uint32_t e = 0; e < in->numel; ++e)
    write(out->type, dst + size_t{e} * out_size, read(in->type, src + size_t{e} * in_size));
  return {};
}

}  // namespace kiln::runtime::kernels
