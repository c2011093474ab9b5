// A bounded, heap-free writer of ExecuTorch's ETDump (devtools/etdump/etdump_schema_flatcc.fbs,
// file identifier "ED00"): one RunData per run, one Event holding a ProfileEvent per event, written
// as a size-prefixed FlatBuffer (the 4-byte little-endian length of what follows it, then the root
// offset and the identifier), as ExecuTorch's ETDumpGen writes it and its reader
// (devtools/etdump/serialize.py, size_prefixed=True) reads it.
//
// Layout: parents before children (every uoffset points forward, each vtable just before its
// table), scalars at their natural alignment counted from the buffer's first byte, so `out` must
// be 8-byte aligned for a CPU to read the 64-bit times in place. Strings are copied, not shared.
//
//   [size u32][root uoffset u32]["ED00"][ETDump vtable][ETDump table]
//   [run_data vector: count, uoffset per run]
//   per run: [RunData vtable][RunData table][name][events vector: count, uoffset per event]
//            per event: [Event vtable][Event table][ProfileEvent vtable][ProfileEvent table]
//                       [name][delegate_debug_id_str]
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/result.h"

namespace kiln::etdump {

constexpr uint32_t kVersion = 0;  // ETDump.version as ExecuTorch's ETDumpGen writes it

// One ProfileEvent; the pointers are borrowed for the write() call only.
struct ProfileEvent {
  const char* name = nullptr;  // nullptr: absent (a delegate's event is named by its debug id)
  int32_t chain_index = 0;
  int32_t instruction_id = -1;                  // -1: absent (the schema's default)
  int32_t delegate_debug_id_int = -1;           // -1: absent
  const char* delegate_debug_id_str = nullptr;  // nullptr: absent
  uint64_t start_time = 0;                      // in the run's unit (the caller says which)
  uint64_t end_time = 0;
};

struct Run {
  const char* name = nullptr;  // RunData.name: required (ExecuTorch's reader refuses a run without one)
  const ProfileEvent* events = nullptr;
  size_t event_count = 0;
};

// Writes the ETDump of `runs` into out[0, capacity) and returns its length in bytes. When it does
// not fit: Error{kTooLarge, a = the bytes it needed up to where it stopped (at least capacity + 1),
// b = capacity}, and nothing at or beyond out + capacity was written. kInvalidArgument (a = 0) for
// a null `out` with a nonzero capacity, (a = 1, b = the run's index) for a run without a name, (a = 2,
// b = the run's index) for a run with events but a null events pointer.
runtime::Result<size_t> write(const Run* runs, size_t run_count, uint8_t* out, size_t capacity);

}  // namespace kiln::etdump
