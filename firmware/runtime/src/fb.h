// A minimal, bounds-checked FlatBuffer reader (internal to the runtime).
//
// Every access checks its bytes lie inside the buffer and returns an Error naming
// the offset otherwise, so the loader's verification pass and the accessors that
// run after it share one code path. Offset 0 never holds a table (the root offset
// is there), so a Table with pos 0 means "absent".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"

namespace kiln::runtime::fb {

struct Reader {
  const uint8_t* base;
  uint32_t size;
  // Work left before the file counts as hostile (aliased tables / vectors); only
  // the loader's verification pass spends it.
  int64_t budget;

  bool contains(uint64_t at, uint64_t n) const { return at <= size && n <= size - at; }

  template <typename T>
  Result<T> read(uint64_t at) const {
    if (!contains(at, sizeof(T))) {
      return Error{ErrorCode::kPteOutOfBounds, static_cast<uint32_t>(at), size};
    }
    T v;
    std::memcpy(&v, base + at, sizeof(T));
    return v;
  }

  Status spend(uint64_t n, uint32_t at) {
    budget -= static_cast<int64_t>(n);
    if (budget < 0) return Error{ErrorCode::kPteTooComplex, at, size};
    return {};
  }
};

struct Table {
  uint32_t pos = 0;
  uint32_t vtable = 0;
  uint16_t vt_size = 0;
  uint16_t obj_size = 0;
  bool present() const { return pos != 0; }
};

struct Vector {
  uint32_t start = 0;  // offset of element 0 (0 when the field is absent)
  uint32_t count = 0;
};

Result<Table> table_at(Reader& r, uint64_t pos);

// The absolute offset of field `slot`, or 0 when it is absent.
Result<uint32_t> field(const Reader& r, const Table& t, unsigned slot);

template <typename T>
Result<T> scalar(const Reader& r, const Table& t, unsigned slot, T fallback = T{}) {
  Result<uint32_t> at = field(r, t, slot);
  if (!at.ok()) return at.error();
  if (at.value() == 0) return fallback;
  return r.read<T>(at.value());
}

// The table field `slot` points at (pos 0 when absent).
Result<Table> child(Reader& r, const Table& t, unsigned slot);

// The vector field `slot` (count 0 when absent); checks its bounds and that its
// start is aligned to `elem_size` (as FlatBuffer writers align vectors).
Result<Vector> vector(Reader& r, const Table& t, unsigned slot, uint32_t elem_size);

// The string field `slot` (size 0 and data nullptr when absent); checks the NUL.
Result<StringView> string(Reader& r, const Table& t, unsigned slot);

// Element i (< v.count) of a vector of tables.
Result<Table> element(Reader& r, const Vector& v, uint32_t i);

// The union at slots (slot, slot + 1): its type code and value table. The value
// must be present when the type is not 0.
struct Union {
  uint8_t type = 0;
  Table value;
};
Result<Union> union_at(Reader& r, const Table& t, unsigned slot);

}  // namespace kiln::runtime::fb
