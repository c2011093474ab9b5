// A row-major walk over up to kMaxDims dims that tracks the element offsets of N tensors
// at once, each with its own strides (0 along a dim it broadcasts). Used by reduce.cpp
// (the outputs and each output's reduced inputs), linalg.cpp (matmul's batch dims) and
// elementwise.h (broadcast operands).
// Offsets are uint32: callers walk only tensors with elements, whose offsets are below
// their numel (bounded to uint32 by the loader).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/types.h"

namespace kiln::runtime::kernels {

template <size_t N>
class Walk {
 public:
  // Appends a dim, outermost first.
  void add(uint32_t size, const uint32_t (&strides)[N]) {
    size_[dims_] = size;
    for (size_t t = 0; t < N; ++t) stride_[t][dims_] = strides[t];
    ++dims_;
  }
  size_t dims() const { return dims_; }
  uint32_t offset(size_t t = 0) const { return offset_[t]; }
  // Steps to the next position in row-major order (after the last: back to the first).
  void next() {
    for (size_t d = dims_; d-- > 0;) {
      for (size_t t = 0; t < N; ++t) offset_[t] += stride_[t][d];
      if (++index_[d] < size_[d]) return;
      for (size_t t = 0; t < N; ++t) offset_[t] -= index_[d] * stride_[t][d];
      index_[d] = 0;
    }
  }

 private:
  size_t dims_ = 0;
  uint32_t size_[kMaxDims] = {};
  uint32_t stride_[N][kMaxDims] = {};
  uint32_t index_[kMaxDims] = {};
  uint32_t offset_[N] = {};
};

}  // namespace kiln::runtime::kernels
