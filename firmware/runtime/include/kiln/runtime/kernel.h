// CPU kernels and the kernel table. A kernel gets the KernelCall's arguments in
// the order the instruction lists them (out-variant kernels: the schema's
// arguments, then the out tensor, then the out tensor again as the result). It
// checks every argument's kind, scalar type and sizes against its operator's
// semantics, and returns kKernelBadArgument / kKernelShapeMismatch /
// kKernelUnsupported (a = argument position) instead of reading or writing out of
// bounds. It writes only its out tensor.
//
// Selective build: firmware/runtime/gen_kernel_table.py writes a C++ file defining
// a KernelTable with exactly the kernels a list of (name, overload) pairs names,
// and fails (naming the operator) for one kiln lacks; only those kernels are linked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime {

// A kernel call's arguments: values of the method (bound, never null).
class KernelArgs {
 public:
  KernelArgs(Value* values, uint32_t value_count, const int32_t* indices, size_t count)
      : values_(values), value_count_(value_count), indices_(indices), count_(count) {}
  size_t size() const { return count_; }
  Value& operator[](size_t i) const { return values_[indices_[i]]; }  // i < size()
  // Item j of the IntList at argument i (verified at bind time: an Int value).
  int64_t int_item(const Value& list, size_t j) const;
  // Tensor j of a TensorList (j < list.list.count; verified at bind time: a Tensor value).
  Tensor& tensor_item(const Value& list, size_t j) const;

 private:
  Value* values_;
  [[maybe_unused]] uint32_t value_count_;  // read by no member yet (clang warns)
  const int32_t* indices_;  // checked against value_count at bind time
  size_t count_;
};

using KernelFn = Status (*)(KernelArgs& args);

struct KernelEntry {
  const char* name;      // "aten::convolution"
  const char* overload;  // "out"
  KernelFn fn;
};

struct KernelTable {
  const KernelEntry* entries = nullptr;
  size_t count = 0;

  KernelFn find(StringView name, StringView overload) const;  // nullptr if absent
};

// The generated table (defined by the file gen_kernel_table.py writes).
extern const KernelTable kKernelTable;

}  // namespace kiln::runtime
