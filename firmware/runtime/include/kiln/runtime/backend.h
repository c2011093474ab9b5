// The delegate (backend) interface. No heap: a backend is a constant Backend record
// the app defines (usually `static const`), whose `context` points at the backend's
// own statically allocated state, including a fixed-size pool of per-delegate
// handles (its size a build-time constant the app chooses from the .pte's delegate
// count; init fails with the backend's own error when the pool is exhausted).
//
// Lifetime: Method::create calls init once per delegate of the program, in delegate
// order, and keeps the returned handle; execute is called per DelegateCall with that
// handle. Handles are never freed by the runtime; a backend that wants to reuse its
// pool provides its own reset for the app to call when no Method uses it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/program.h"
#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime {

struct BackendInitArgs {
  const Program* program;      // for named data: program->find_named_data(key)
  uint32_t delegate_index;
  Span<const uint8_t> payload; // the delegate's processed bytes, inside the .pte
  CompileSpecs compile_specs;
};

// The tensors of one DelegateCall: its inputs then its outputs, in the order the
// instruction lists them. A view, not a copy: the Method's values through the
// instruction's value indices (inside the .pte, checked when it was loaded), so any
// number of arguments takes no storage; valid only during the execute call.
class DelegateArgs {
 public:
  DelegateArgs(Value* values, const int32_t* indices, size_t count)
      : values_(values), indices_(indices), count_(count) {}
  size_t size() const { return count_; }
  Tensor& operator[](size_t i) const { return values_[indices_[i]].t; }  // i < size()

 private:
  Value* values_;
  const int32_t* indices_;
  size_t count_;
};

struct Backend {
  const char* id;  // matched against the delegate's id string, e.g. "EthosUBackend"
  void* context;   // the backend's static state; passed back to both calls
  // Returns an opaque handle for the delegate (the backend owns what it points to).
  Result<void*> (*init)(void* context, const BackendInitArgs& args);
  // args: the DelegateCall's tensors, its inputs then its outputs, in the order the
  // instruction lists them (each has data; the runtime checked they are tensors).
  // An input already at the address input_place gave for it is not copied.
  Status (*execute)(void* context, void* handle, const DelegateArgs& args);
  // Optional (nullptr: none). Where the backend reads argument `arg` of its DelegateCall
  // from, when that argument is one of its inputs and has `nbytes` bytes (else nullptr):
  // memory the backend owns, valid while the handle is. Method::create binds there a
  // program input that only the chain's first instruction reads (method.h).
  void* (*input_place)(void* context, void* handle, size_t arg, size_t nbytes) = nullptr;
};

struct BackendTable {
  const Backend* const* backends = nullptr;
  size_t count = 0;

  const Backend* find(StringView id) const;  // nullptr if none has this id
};

}  // namespace kiln::runtime
