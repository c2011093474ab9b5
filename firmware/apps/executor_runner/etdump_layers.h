// The NPU layers of each delegate of the program the runner bakes, for its ETDump
// (etdump_profiling.cpp). kiln.reference.etdump generates the definitions (etdump_layers.cpp)
// from `kiln profile`'s join of every NPU command to the model op it came from.
#pragma once

#include <cstdint>

namespace kiln::runner::etdump_layers {

struct Layer {
  const char* label;  // the model's module path and op, e.g. "conv1 aten.conv2d"
  uint32_t cycles;    // the NPU cycles kiln's NPU model accounts to it (its share of the stream)
};

struct Delegate {
  int32_t instruction_id;  // the program instruction (chain 0) that calls the delegate
  const Layer* layers;     // in the order the stream runs them
  uint32_t count;
  uint32_t cycles;  // the sum of the layers' cycles: less than 2^32
};

// By delegate index (the program's order).
extern const Delegate kDelegates[];
extern const uint32_t kDelegateCount;

}  // namespace kiln::runner::etdump_layers
