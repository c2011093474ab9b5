// aten::view_copy.out (self, size, out): copies the bytes; `size` must equal out's
// sizes (kiln writes them in full) and the element counts must match.
#include <cstring>

#include "kiln/runtime/try.h"
#include "movement.h"

namespace kiln::runtime::kernels {

Status view_copy_out(KernelArgs& args) {
  KILN_CHECK(expect_arity(args, 2));
  KILN_TRY(const Tensor* in, any_tensor(args, 0));
  KILN_TRY(Tensor * out, output_like(args, 2, *in));
  int64_t sizes[kMaxDims];
  size_t dim = 0;
  KILN_CHECK(int_list_arg(args, 1, sizes, kMaxDims, &dim));
  KILN_CHECK(expect_sizes(*out, sizes, dim, 1));
  if (out->numel != in->numel) return shape_mismatch(2);
  if (in->nbytes != 0) std::memmove(out->data, in->data, in->nbytes);
  return {};
}

}  // namespace kiln::runtime::kernels
