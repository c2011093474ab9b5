// Shared pieces of the data-movement kernels (view.cpp, movement.cpp, gather.cpp,
// cast.cpp, pool_max.cpp): tensors of any scalar type, contiguous strides, and the gather
// that most of them are.
//
// A gather writes every element of `out` in row-major order; output coordinate o[d] along
// each output dimension d selects input coordinate src(axis[d], o[d]) (or the fill value),
// and the element read is in[base + sum_d src * axis[d].stride]. Each kernel builds its axes
// from checked arguments; the gather still checks every offset against the input's element
// count, so a wrong axis is an error, never a read outside the tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util.h"

namespace kiln::runtime::kernels {

// A tensor argument of any scalar type (data checked as input_tensor does).
Result<const Tensor*> any_tensor(const KernelArgs& args, size_t i);

// The out tensor (position n) of the same scalar type as `like`.
Result<Tensor*> output_like(const KernelArgs& args, size_t n, const Tensor& like);

// max_pool2d.out's work for a call of `arity` arguments whose first six are max_pool2d's
// (aten::max_pool2d, cortex_m::quantized_max_pool2d and _s16), the out tensor at `arity`; an
// int8 or int16 result is clamped to range[0], range[1] (values of its type; nullptr: none, and
// no int16 input).
Status max_pool2d(KernelArgs& args, size_t arity, const int32_t* range);

// Row-major strides (in elements) of `t`: strides[d] = product of sizes after d, each below
// numel; all 0 for a tensor without elements (no read of it is inside it: gather refuses any).
// kKernelUnsupported (a = position) if a product passes int64 (it cannot while numel > 0).
Status contiguous_strides(const Tensor& t, int64_t* strides, size_t position);

// The element steps in `t`'s memory of its dims, by its DimOrder: contiguous_strides, or for a
// channels-last tensor (4-D) those of N, C, H, W in memory laid out N, H, W, C.
Status memory_strides(const Tensor& t, int64_t* strides, size_t position);

enum class Map : uint8_t {
  kAffine,     // first + step * o
  kConstant,   // o - before when inside [0, extent), else the fill value
  kReflect,    // o - before reflected at both ends (no edge repeated); pads < extent
  kReplicate,  // o - before clamped to [0, extent)
  kCircular,   // o - before modulo extent; pads <= extent
  kNearest,    // PyTorch's nearest index of o for an input of `extent` (upsample_nearest2d)
};

struct Axis {
  Map map = Map::kAffine;
  int64_t size = 1;    // the output's size along this dimension
  int64_t stride = 0;  // input elements between neighbouring input coordinates
  int64_t first = 0, step = 1;  // kAffine
  int64_t before = 0;           // the pads
  int64_t extent = 1;           // the input's size along this dimension (pads, kNearest)
  float scale = 0.0f;           // kNearest: float(1 / scale factor), or float(in) / float(out)
};

// The identity axis of input dimension d.
Axis identity_axis(const Tensor& in, const int64_t* strides, size_t d);

// Copies per the axes (dim of them, matching out's sizes, checked); `fill` is one element
// of out's type (nullptr when no axis is kConstant). Each axis's stride steps in the input's
// memory; out is written in its own DimOrder.
Status gather(const Tensor& in, Tensor& out, const Axis* axes, size_t dim, int64_t base, const void* fill,
              size_t position);

// out's sizes must be the axes' sizes.
Status expect_axes(const Tensor& out, const Axis* axes, size_t dim, size_t position);

}  // namespace kiln::runtime::kernels
