// The requantization of the integer kernels of weights (internal): quantized_conv.cpp,
// quantized_depthwise.cpp and quantized_linear.cpp. CMSIS-NN's arithmetic (fixed_point.h): each
// output's int32 sum times its channel's multiplier, shifted, plus the output offset, clamped.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dot.h"
#include "kiln/runtime/try.h"
#include "quantized.h"

namespace kiln::runtime::kernels {

constexpr int64_t kMaxParam = 1 << 16;  // strides, padding, dilation, offsets

// Per-channel requantization: multipliers and shifts with 1 or `channels` items.
struct Requantization {
  const int32_t* tensor_multipliers = nullptr;  // Int tensors (conv), else the lists below
  const int32_t* tensor_shifts = nullptr;
  int64_t list_multipliers[1] = {0}, list_shifts[1] = {0};
  const KernelArgs* args = nullptr;
  size_t list_at = 0;  // position of the multiplier IntList (its shifts follow)
  bool per_channel = false;
  bool no_min_multiplier = true;  // no multiplier is INT32_MIN (where VQRDMULH saturates)

  int32_t multiplier(int64_t channel) const {
    if (tensor_multipliers != nullptr) return tensor_multipliers[channel];
    return static_cast<int32_t>(per_channel ? args->int_item((*args)[list_at], static_cast<size_t>(channel))
                                            : list_multipliers[0]);
  }
  int32_t shift(int64_t channel) const {
    if (tensor_shifts != nullptr) return tensor_shifts[channel];
    return static_cast<int32_t>(per_channel ? args->int_item((*args)[list_at + 1], static_cast<size_t>(channel))
                                            : list_shifts[0]);
  }
  int32_t apply(int32_t acc, int64_t channel) const {
    return fixed::requantize(acc, multiplier(channel), shift(channel));
  }
};

// The int8 output of a sum: requantized for its channel, plus the output offset, clamped.
struct OutputStage {
  const Requantization* q;
  int32_t offset;
  int32_t range[2];

  int8_t scalar(int32_t acc, int64_t channel) const { return offset_clamp(q->apply(acc, channel), offset, range); }
};

#if defined(KILN_HELIUM)
// fixed::requantize of four lanes (one rounding), wherever the multiplier is not INT32_MIN
// (Requantization::no_min_multiplier, where VQDMULH and VQRDMULH saturate). With x the value
// shifted left and r = -shift > 0: VQDMULH is floor(x m / 2^31), and VRSHL's rounding shift by r
// of it is floor((x m + 2^(30 + r)) / 2^(31 + r)), the quotient rounded once; with no right
// shift, VQRDMULH is floor((x m + 2^30) / 2^31), the same.
struct LaneRequantization {
  int32x4_t multiplier, left, right;  // right <= 0: a right shift by -right
  // All ones in the lanes that shift right, else 0: a vector, not a predicate, so that no general
  // register is held across a caller's loop.
  int32x4_t shifts_right;

  LaneRequantization() = default;
  LaneRequantization(int32x4_t multipliers, int32x4_t shifts)
      : multiplier(multipliers),
        left(vmaxq_s32(shifts, vdupq_n_s32(0))),
        right(vminq_s32(shifts, vdupq_n_s32(0))),
        shifts_right(vshrq_n_s32(shifts, 31)) {}

  // The output stage's int32 values of four sums (before the narrowing store).
  int32x4_t apply(int32x4_t acc, const OutputStage& out) const {
    const int32x4_t x = vshlq_s32(acc, left);
    const int32x4_t shifted_right = vrshlq_s32(vqdmulhq_s32(x, multiplier), right);
    int32x4_t v =
        vorrq_s32(vandq_s32(shifted_right, shifts_right), vbicq_s32(vqrdmulhq_s32(x, multiplier), shifts_right));
    v = vqaddq_n_s32(v, out.offset);  // saturating: the clamp gives the same
    return vminq_s32(vmaxq_s32(v, vdupq_n_s32(out.range[0])), vdupq_n_s32(out.range[1]));
  }
};

// LaneRequantization's arithmetic for four values of one channel, its parameters scalars.
struct ChannelRequantization {
  int32_t multiplier = 0, left = 0, right = 0;  // right <= 0: a right shift by -right
  int32x4_t low, high;

  ChannelRequantization() = default;
  ChannelRequantization(const Requantization& q, int64_t channel, const OutputStage& out)
      : ChannelRequantization(q.multiplier(channel), q.shift(channel), out) {}
  ChannelRequantization(int32_t channel_multiplier, int32_t shift, const OutputStage& out)
      : multiplier(channel_multiplier),
        left(shift > 0 ? shift : 0),
        right(shift < 0 ? shift : 0),
        low(vdupq_n_s32(out.range[0])),
        high(vdupq_n_s32(out.range[1])) {}

  int32x4_t apply(int32x4_t acc, int32_t offset) const {
    const int32x4_t x = vshlq_r_s32(acc, left);
    const int32x4_t v =
        right == 0 ? vqrdmulhq_n_s32(x, multiplier) : vrshlq_n_s32(vqdmulhq_n_s32(x, multiplier), right);
    return vminq_s32(vmaxq_s32(vqaddq_n_s32(v, offset), low), high);
  }
};
#endif

// Every multiplier in int32 and every shift within 31; *no_min: no multiplier is INT32_MIN.
inline Status check_items(const KernelArgs& args, size_t at, bool* no_min) {
  const Value& m = args[at];
  const Value& s = args[at + 1];
  for (size_t j = 0; j < m.list.count; ++j) {
    const int64_t v = args.int_item(m, j);
    if (v < INT32_MIN || v > INT32_MAX) return unsupported(at, static_cast<uint32_t>(j));
    *no_min &= v != INT32_MIN;
  }
  for (size_t j = 0; j < s.list.count; ++j) {
    const int64_t v = args.int_item(s, j);
    if (v < -31 || v > 31) return unsupported(at + 1, static_cast<uint32_t>(j));
  }
  return {};
}

// IntList multipliers and shifts (positions at, at + 1): 1 or `channels` items each.
inline Result<Requantization> list_requantization(const KernelArgs& args, size_t at, int64_t channels) {
  const Value& m = args[at];
  const Value& s = args[at + 1];
  if (m.kind != ValueKind::kIntList) return bad_argument(at, static_cast<uint32_t>(m.kind));
  if (s.kind != ValueKind::kIntList) return bad_argument(at + 1, static_cast<uint32_t>(s.kind));
  if (m.list.count != s.list.count || (m.list.count != 1 && m.list.count != channels)) return shape_mismatch(at);
  Requantization r;
  KILN_CHECK(check_items(args, at, &r.no_min_multiplier));
  r.args = &args, r.list_at = at, r.per_channel = m.list.count != 1;
  r.list_multipliers[0] = args.int_item(m, 0), r.list_shifts[0] = args.int_item(s, 0);
  return r;
}

// Whether every shift of `channels` lies within 31 (*no_min: and no multiplier is INT32_MIN).
inline bool shifts_within_31(const int32_t* multipliers, const int32_t* shifts, int64_t channels, bool* no_min) {
  const auto n = static_cast<ptrdiff_t>(channels);
  ptrdiff_t c = 0;
#if defined(KILN_HELIUM)
  int32x4_t low = vdupq_n_s32(0), high = low, least = vdupq_n_s32(INT32_MAX);  // INT32_MIN is the least
  for (; c + 4 <= n; c += 4) {
    const int32x4_t v = vld1q_s32(shifts + c);
    low = vminq_s32(low, v), high = vmaxq_s32(high, v), least = vminq_s32(least, vld1q_s32(multipliers + c));
  }
  *no_min &= vminvq_s32(INT32_MAX, least) != INT32_MIN;
  bool within = vminvq_s32(0, low) >= -31 && vmaxvq_s32(0, high) <= 31;
#else
  bool within = true;
#endif
  for (; c < n; ++c) {
    within &= shifts[c] >= -31 && shifts[c] <= 31;
    *no_min &= multipliers[c] != INT32_MIN;
  }
  return within;
}

// Int tensors of `channels` multipliers and shifts (positions at, at + 1).
inline Result<Requantization> tensor_requantization(const KernelArgs& args, size_t at, int64_t channels) {
  KILN_TRY(const Tensor* m, input_tensor(args, at, ScalarType::kInt));
  KILN_TRY(const Tensor* s, input_tensor(args, at + 1, ScalarType::kInt));
  if (m->dim != 1 || m->sizes[0] != channels) return shape_mismatch(at);
  if (s->dim != 1 || s->sizes[0] != channels) return shape_mismatch(at + 1);
  Requantization r;
  r.tensor_multipliers = static_cast<const int32_t*>(m->data), r.tensor_shifts = static_cast<const int32_t*>(s->data);
  if (!shifts_within_31(r.tensor_multipliers, r.tensor_shifts, channels, &r.no_min_multiplier)) {
    for (int64_t c = 0; c < channels; ++c) {  // the first shift beyond 31, for the error
      if (r.tensor_shifts[c] < -31 || r.tensor_shifts[c] > 31) return unsupported(at + 1, static_cast<uint32_t>(c));
    }
  }
  return r;
}

// An optional Int tensor of `channels` values (bias, kernel_sum): nullptr for None.
inline Result<const int32_t*> optional_channels(const KernelArgs& args, size_t i, int64_t channels) {
  if (is_null(args, i)) return static_cast<const int32_t*>(nullptr);
  KILN_TRY(const Tensor* t, input_tensor(args, i, ScalarType::kInt));
  if (t->numel != channels) return shape_mismatch(i, t->numel);
  return static_cast<const int32_t*>(t->data);
}

// Element steps of an output's channels and pixels along a row, in memory.
struct Steps {
  ptrdiff_t channel, pixel;
};

#if defined(KILN_HELIUM)
// Four int32 lanes narrowed to the bytes at y + lane step (the lanes p enables).
inline void store_lanes(int8_t* y, ptrdiff_t step, int32x4_t v, mve_pred16_t p) {
  if (step == 1) {
    vstrbq_p_s32(y, v, p);
  } else {
    vstrbq_scatter_offset_p_s32(y, vmulq_n_u32(vidupq_n_u32(0, 1), static_cast<uint32_t>(step)), v, p);
  }
}
#endif

}  // namespace kiln::runtime::kernels
