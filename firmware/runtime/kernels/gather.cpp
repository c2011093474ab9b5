// Gathers and scatters by an index tensor (int32 or int64), of any scalar type, as
// kiln.program.kernels.movement:
//   aten::index_select.out (self, dim, index, out): index 0-D or 1-D
//   aten::embedding.out (weight, indices, padding_idx, scale_grad_by_freq, sparse, out):
//       weight 2-D, out = indices' sizes + [weight's columns]; padding_idx and the
//       gradient flags do not change the values
//   kiln::checked_index.out (index, size, out): out = index as int32, same sizes (the
//       indices of a gather or scatter the NPU runs)
//   aten::index_copy.out (self, dim, index, source, out): out = self with its entries
//       index[j] along dim replaced by source's j-th; index 0-D or 1-D, source self's sizes
//       with index's count along dim, out self's; written in index order (a repeated index:
//       the last write stays); out may be self's own storage (an update in place)
// Every index must be in [0, size): one outside is kKernelBadArgument (a = the index
// tensor's position, b = the index's low 32 bits), never a read or a write.
#include <cstring>

#include "kiln/runtime/try.h"
#include "movement.h"

namespace kiln::runtime::kernels {

namespace {

Result<const Tensor*> index_tensor(const KernelArgs& args, size_t i) {
  const Value& v = args[i];
  if (v.kind != ValueKind::kTensor) return bad_argument(i, static_cast<uint32_t>(v.kind));
  if (v.t.type != ScalarType::kInt && v.t.type != ScalarType::kLong) {
    return bad_argument(i, 0x100u + static_cast<uint32_t>(v.t.type));
  }
  return input_tensor(args, i, v.t.type);
}

int64_t index_at(const Tensor& index, uint32_t j) {
  if (index.type == ScalarType::kInt) {
    int32_t v;
    std::memcpy(&v, static_cast<const uint8_t*>(index.data) + 4 * size_t{j}, sizeof v);
    return v;
  }
  int64_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(index.data) + 8 * size_t{j}, sizeof v);
  return v;
}

// Every index in [0, rows), else kKernelBadArgument (a = the index tensor's position).
Status check_indices(const Tensor& index, size_t index_position, int64_t rows) {
  for (uint32_t j = 0; j < index.numel; ++j) {
    const int64_t row = index_at(index, j);
    if (row < 0 || row >= rows) return bad_argument(index_position, static_cast<uint32_t>(row));
  }
  return {};
}

// out = `outer` blocks, each index.numel runs of `run` bytes: run index[j] of in's block,
// which has `rows` runs. out has outer * index.numel * run bytes and elements (the caller
// checked), so in's block offsets o * rows + row stay below in's numel.
void gather_runs(const Tensor& in, const Tensor& index, Tensor& out, int64_t outer, int64_t rows, size_t run) {
  const auto* src = static_cast<const uint8_t*>(in.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  for (int64_t o = 0; o < outer; ++o) {
    for (uint32_t j = 0; j < index.numel; ++j) {
      std::memcpy(dst, src + static_cast<size_t>(o * rows + index_at(index, j)) * run, run);
      dst += run;
    }
  }
}

// The reverse of gather_runs: run j of in's block o (in has index.numel runs a block) goes to
// run index[j] of out's block o (out has `rows` runs a block). The caller checked the sizes
// and every index against `rows`, so each write stays inside out.
void scatter_runs(const Tensor& in, const Tensor& index, Tensor& out, int64_t outer, int64_t rows, size_t run) {
  const auto* src = static_cast<const uint8_t*>(in.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  for (int64_t o = 0; o < outer; ++o) {
    for (uint32_t j = 0; j < index.numel; ++j) {
      std::memcpy(dst + static_cast<size_t>(o * rows + index_at(index, j)) * run, src, run);
      src += run;
    }
  }
}

// index_select's and index_copy's shared arguments: self (position 0), dim (1) and a 0-D or
// 1-D index (2); `sizes` are self's with the index's count along dim (index_select's result,
// index_copy's source), `outer` the blocks of the dims before dim and `run` the bytes of those
// after it (for an empty self, 0 and whatever the sizes give).
struct AlongDim {
  const Tensor* in;
  size_t dim;
  const Tensor* index;
  int64_t sizes[kMaxDims];
  int64_t outer;
  size_t run;
};

Result<AlongDim> along_dim(const KernelArgs& args) {
  AlongDim a{};
  KILN_TRY(a.in, any_tensor(args, 0));
  KILN_TRY(int64_t dim_arg, int_arg(args, 1));
  KILN_TRY(a.dim, dim_index(dim_arg, a.in->dim, 1));
  KILN_TRY(a.index, index_tensor(args, 2));
  if (a.index->dim > 1) return unsupported(2, a.index->dim);
  for (size_t d = 0; d < a.in->dim; ++d) a.sizes[d] = d == a.dim ? int64_t{a.index->numel} : a.in->sizes[d];
  if (a.in->numel == 0) return a;  // outer and run 0: nothing to move, whatever (empty) sizes say
  KILN_TRY(a.outer, size_product(*a.in, 0, a.dim, 0));
  KILN_TRY(const int64_t inner, size_product(*a.in, a.dim + 1, a.in->dim, 0));
  KILN_TRY(const int64_t run,
           checked_mul(inner, static_cast<int64_t>(element_size(static_cast<int8_t>(a.in->type))), 0));
  a.run = static_cast<size_t>(run);
  return a;
}

}  // namespace

Status index_select_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 3));
  KILN_TRY(const AlongDim a, along_dim(args));
  KILN_TRY(Tensor * out, output_like(args, 3, *a.in));
  KILN_CHECK(expect_sizes(*out, a.sizes, a.in->dim, 3));
  KILN_CHECK(check_indices(*a.index, 2, a.in->sizes[a.dim]));
  if (out->numel == 0) return {};  // nothing to copy, however many (empty) blocks
  gather_runs(*a.in, *a.index, *out, a.outer, a.in->sizes[a.dim], a.run);
  return {};
}

Status embedding_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 5));
  KILN_TRY(const Tensor* weight, any_tensor(args, 0));
  if (weight->dim != 2) return unsupported(0, weight->dim);
  KILN_TRY(const Tensor* indices, index_tensor(args, 1));
  KILN_TRY(int64_t padding_idx, int_arg(args, 2));
  KILN_TRY(bool scale_grad_by_freq, bool_arg(args, 3));
  KILN_TRY(bool sparse, bool_arg(args, 4));
  (void)padding_idx, (void)scale_grad_by_freq, (void)sparse;  // gradients only
  if (indices->dim + 1u > kMaxDims) return unsupported(1, indices->dim);
  KILN_TRY(Tensor * out, output_like(args, 5, *weight));
  int64_t sizes[kMaxDims];
  for (size_t d = 0; d < indices->dim; ++d) sizes[d] = indices->sizes[d];
  sizes[indices->dim] = weight->sizes[1];
  KILN_CHECK(expect_sizes(*out, sizes, indices->dim + 1u, 5));
  KILN_CHECK(check_indices(*indices, 1, weight->sizes[0]));
  if (out->numel == 0) return {};
  KILN_TRY(const int64_t run,
           checked_mul(weight->sizes[1], static_cast<int64_t>(element_size(static_cast<int8_t>(weight->type))), 0));
  gather_runs(*weight, *indices, *out, 1, weight->sizes[0], static_cast<size_t>(run));
  return {};
}

Status index_copy_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 4));
  KILN_TRY(const AlongDim a, along_dim(args));
  KILN_TRY(const Tensor* source, input_tensor(args, 3, a.in->type));
  KILN_CHECK(expect_sizes(*source, a.sizes, a.in->dim, 3));
  KILN_TRY(Tensor * out, output_like(args, 4, *a.in));
  if (!same_sizes(*out, *a.in)) return shape_mismatch(4);
  KILN_CHECK(check_indices(*a.index, 2, a.in->sizes[a.dim]));
  if (out->numel == 0) return {};
  if (out->data != a.in->data) std::memmove(out->data, a.in->data, a.in->nbytes);  // planned apart, or the same
  scatter_runs(*source, *a.index, *out, a.outer, a.in->sizes[a.dim], a.run);
  return {};
}

Status kiln_checked_index_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(const Tensor* index, index_tensor(args, 0));
  KILN_TRY(int64_t size, int_arg(args, 1));
  KILN_TRY(Tensor * out, output_tensor(args, 2, ScalarType::kInt));
  if (!same_sizes(*out, *index)) return bad_argument(2);
  KILN_CHECK(check_indices(*index, 0, size));
  auto* y = static_cast<int32_t*>(out->data);
  for (uint32_t j = 0; j < index->numel; ++j) y[j] = static_cast<int32_t>(index_at(*index, j));  // in [0, size)
  return {};
}

}  // namespace kiln::runtime::kernels
