// Argument checking and tensor helpers shared by the CPU kernels (internal).
//
// Every kernel checks each argument's kind, scalar type and sizes before it
// touches data, so a hostile program gets kKernel* errors (a = argument position,
// b = detail) instead of out-of-bounds reads or writes. Out-variant calls list the
// out tensor after the schema's n arguments, then again as the returned value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/kernel.h"
#include "kiln/runtime/result.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime::kernels {

Error bad_argument(size_t position, uint32_t detail = 0);
Error shape_mismatch(size_t position, uint32_t detail = 0);
Error unsupported(size_t position, uint32_t detail = 0);

// The call has the schema's n arguments, then the out tensor twice.
Status expect_arity(const KernelArgs& args, size_t n);

// A tensor argument of `type` with data (nullptr data only when it has no bytes), contiguous
// (a channels-last one is kKernelUnsupported, b = kChannelsLastDetail).
Result<const Tensor*> input_tensor(const KernelArgs& args, size_t i, ScalarType type);
// The out tensor (position n): of `type`, writable (not constant), with data, contiguous.
Result<Tensor*> output_tensor(const KernelArgs& args, size_t n, ScalarType type);
constexpr uint32_t kChannelsLastDetail = 0x400;

// As input_tensor and output_tensor, in either DimOrder: for the kernels that read the order
// (the elementwise ones where all their tensors share it, and the spatial integer cortex_m
// kernels of ExecuTorch's Cortex-M flow).
Result<const Tensor*> input_tensor_any_order(const KernelArgs& args, size_t i, ScalarType type);
Result<Tensor*> output_tensor_any_order(const KernelArgs& args, size_t n, ScalarType type);
// `b` is in `a`'s DimOrder (kKernelUnsupported at `position`, b = kChannelsLastDetail, if not).
Status same_order(const Tensor& a, const Tensor& b, size_t position);
// Element steps in `t`'s memory of its four dims N, C, H, W (t is 4-D), by its DimOrder; all
// 0 for an empty tensor (whose sizes' product may pass int64).
void nchw_steps(const Tensor& t, int64_t steps[4]);

Result<double> number_arg(const KernelArgs& args, size_t i);  // Double or Int
Result<int64_t> int_arg(const KernelArgs& args, size_t i);
Result<bool> bool_arg(const KernelArgs& args, size_t i);
bool is_null(const KernelArgs& args, size_t i);

// An IntList of at most `max` items into out[]; *count gets its length.
Status int_list_arg(const KernelArgs& args, size_t i, int64_t* out, size_t max, size_t* count);
// A pair from an IntList of 1 (repeated) or 2 items, each in [lo, hi].
Status pair_arg(const KernelArgs& args, size_t i, int64_t lo, int64_t hi, int64_t pair[2]);

bool same_sizes(const Tensor& a, const Tensor& b);
// Checks `t` has exactly the given sizes (position is for the error).
Status expect_sizes(const Tensor& t, const int64_t* sizes, size_t dim, size_t position);

inline const float* f32(const Tensor& t) { return static_cast<const float*>(t.data); }
inline float* f32(Tensor& t) { return static_cast<float*>(t.data); }

// A float32 tensor whose sizes equal the input's (elementwise kernels).
Result<Tensor*> same_shape_output(const KernelArgs& args, size_t n, const Tensor& like);

// Normalises a dimension index (negative counts from the end) into [0, dim).
Result<size_t> dim_index(int64_t d, size_t dim, size_t position);

// --- Overflow-safe arithmetic on integers from the program --------------------------
// Sizes, strides, groups, offsets and counts come from the .pte. A tensor's element count
// fits uint32 (the loader checks it), but a product of some of its sizes need not even
// fit int64 when another size is 0, and an Int argument is any int64. So kernels combine
// such integers through these helpers (or after range checks whose bound they state next
// to the arithmetic): each gives the exact int64 result, or kKernelUnsupported
// (a = position, the argument the integers came from; b = 0) when it does not fit.
Result<int64_t> checked_add(int64_t a, int64_t b, size_t position);
Result<int64_t> checked_mul(int64_t a, int64_t b, size_t position);
// The product of t's sizes along dims [from, to) (1 when from >= to).
Result<int64_t> size_product(const Tensor& t, size_t from, size_t to, size_t position);

// PyTorch's pooling output size (0 when not even one window fits): floor((size + 2 pad - k
// (+ s - 1 with ceil_mode)) / s) + 1, less one with ceil_mode when the last window would start
// at or beyond size + pad. Sizes within 2^31, the rest within 2^16 (pool.cpp).
int64_t pool_size(int64_t size, int64_t k, int64_t s, int64_t pad, bool ceil_mode);

}  // namespace kiln::runtime::kernels
