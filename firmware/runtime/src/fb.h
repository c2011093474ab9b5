// A minimal FlatBuffer reader (internal to the runtime), in two kinds:
//  - Verifier: the loader's one verification pass over a .pte (Program::load). Every read
//    is checked, and the first failure is kept as an Error naming the offset.
//  - Verified: every read after Program::load verified the program (Program's accessors,
//    the Method). It reports nothing (see its comment).
// Offset 0 never holds a table (the root offset is there), so a Table with pos 0 means
// "absent".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kiln/runtime/program.h"
#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"

namespace kiln::runtime::fb {

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

// A union's type code and value table (type 0: none).
struct Union {
  uint8_t type = 0;
  Table value;
};

// The loader's reader over the FlatBuffer part of a .pte not yet verified. Every read
// checks that its bytes lie inside the part (else kPteOutOfBounds), and every table,
// vector, string and union that it is well formed (fb.cpp: the errors each can give). It
// keeps the first failure (error()); every read after one returns zero, an absent table
// or an empty vector without reading, so a pass reads straight on and reports at its end
// the error an early return would have given (its reads up to that failure are the same).
// The work budget (reads of tables and vectors, in bytes) bounds a pass over a hostile
// file whose tables and vectors overlap: spent, it fails with kPteTooComplex.
class Verifier {
 public:
  Verifier(const uint8_t* base, uint32_t size, int64_t budget) : base_(base), size_(size), budget_(budget) {}

  bool ok() const { return error_.code == ErrorCode::kOk; }
  const Error& error() const { return error_; }  // Error{kOk} while ok()
  // Keeps `error` if it is the first failure.
  void fail(const Error& error) {
    if (ok()) error_ = error;
  }
  // Fails with kPteBadIndex (a = index, b = count) unless 0 <= index < count.
  void check_index(int64_t index, uint32_t count);

  template <typename T>
  T read(uint64_t at) {
    T v{};
    if (readable(at, sizeof(T))) std::memcpy(&v, base_ + at, sizeof(T));
    return v;
  }
  Table table(uint64_t pos);
  // The absolute offset of field `slot`, or 0 when it is absent.
  uint32_t field(const Table& t, unsigned slot);
  template <typename T>
  T scalar(const Table& t, unsigned slot) {
    const uint32_t at = field(t, slot);
    return at == 0 ? T{} : read<T>(at);
  }
  // The table field `slot` points at (absent when the field is).
  Table child(const Table& t, unsigned slot);
  // The vector field `slot` (count 0 when absent): its elements inside the part, its start
  // aligned to `elem_size` (as FlatBuffer writers align vectors).
  Vector vector(const Table& t, unsigned slot, uint32_t elem_size);
  // Checks the string field `slot` (absent, or bytes followed by their NUL).
  void string(const Table& t, unsigned slot);
  // Element i (< v.count) of a vector of tables.
  Table element(const Vector& v, uint32_t i);
  // The union at slots (slot, slot + 1); its value must be present when its type is not 0.
  Union union_at(const Table& t, unsigned slot);

 private:
  // ok() and [at, at + n) inside the part; else fails with kPteOutOfBounds (a = at, b = size).
  bool readable(uint64_t at, uint64_t n);
  bool contains(uint64_t at, uint64_t n) const { return at <= size_ && n <= size_ - at; }
  void spend(uint64_t n, uint32_t at);
  uint32_t target(const Table& t, unsigned slot);

  const uint8_t* base_;
  uint32_t size_;
  int64_t budget_;
  Error error_{ErrorCode::kOk, 0, 0};
};

// Reader over a verified program's FlatBuffer part. Program::load checked every table,
// vector, string and field read here, so these reads report nothing and cannot fail on
// a loaded program. Each still checks that its bytes lie inside the FlatBuffer part, and
// one that does not yields zero (an absent table, an empty vector or string, a zero
// scalar): a failed read would yield zeros, never a fault, and nothing traps. Offsets stay
// below `size` (a table lies inside it with its vtable, a field inside its table, a
// vector's elements inside it), so 32-bit sums cannot wrap.
struct Verified {
  const uint8_t* base;
  uint32_t size;
  Verified(const uint8_t* bytes, uint32_t flatbuffer_size) : base(bytes), size(flatbuffer_size) {}
  // Accessors never read past the FlatBuffer part; the whole file bounds it too.
  explicit Verified(const Program& p) : Verified(p.bytes(), p.flatbuffer_size()) {}

  bool contains(uint32_t at, uint32_t n) const { return at <= size && n <= size - at; }
  // Always inlined: a bounds check and a load, on every verified read of execute().
  template <typename T>
  [[gnu::always_inline]] T at(uint32_t offset) const {
    T v{};
    if (sizeof(T) <= size && offset <= size - sizeof(T)) std::memcpy(&v, base + offset, sizeof(T));
    return v;
  }
  // `from` (< size) plus a relative offset read there, or 0 when that lies past the end.
  uint32_t follow(uint32_t from) const {
    const uint32_t offset = at<uint32_t>(from);
    return offset <= size - from ? from + offset : 0;
  }
  Table table(uint32_t pos) const {
    if (pos == 0 || !contains(pos, 4)) return {};
    const int64_t vtable = static_cast<int64_t>(pos) - at<int32_t>(pos);
    if (vtable < 0 || !contains(static_cast<uint32_t>(vtable), 4)) return {};
    Table t;
    t.vtable = static_cast<uint32_t>(vtable);
    t.vt_size = at<uint16_t>(t.vtable);
    t.obj_size = at<uint16_t>(t.vtable + 2);
    if (!contains(t.vtable, t.vt_size) || !contains(pos, t.obj_size)) return {};
    t.pos = pos;
    return t;
  }
  // The offset of field `slot` (inside its table), or 0 when it is absent.
  uint32_t field(const Table& t, unsigned slot) const {
    const uint32_t entry = 4 + 2 * slot;
    if (!t.present() || entry + 2 > t.vt_size) return 0;
    const uint16_t voffset = at<uint16_t>(t.vtable + entry);
    return voffset == 0 || voffset >= t.obj_size ? 0 : t.pos + voffset;
  }
  // Where the offset field `slot` points (0 when absent).
  uint32_t target(const Table& t, unsigned slot) const {
    const uint32_t from = field(t, slot);
    return from == 0 ? 0 : follow(from);
  }
  Table child(const Table& t, unsigned slot) const { return table(target(t, slot)); }
  // elem is 1, 4 or 8: the elements lie inside the part, aligned to their size.
  Vector vector(const Table& t, unsigned slot, uint32_t elem) const {
    const uint32_t to = target(t, slot);
    const uint32_t count = to == 0 ? 0 : at<uint32_t>(to);
    if (count == 0) return {};
    const uint32_t start = to + 4;  // the count was read: no wrap
    if (static_cast<uint64_t>(count) * elem > size - start || (start & (elem - 1)) != 0) return {};
    return Vector{start, count};
  }
  StringView string(const Table& t, unsigned slot) const {
    const Vector v = vector(t, slot, 1);
    if (v.count == 0 || at<uint8_t>(v.start + v.count) != 0) return {};
    return StringView{reinterpret_cast<const char*>(base + v.start), v.count};
  }
  // The bytes of the ubyte vector field `slot` (empty when absent).
  Span<const uint8_t> bytes(const Table& t, unsigned slot) const {
    const Vector v = vector(t, slot, 1);
    return {static_cast<const uint8_t*>(pointer(v.start)), v.count};
  }
  Table element(const Vector& v, uint32_t i) const { return i < v.count ? table(follow(v.start + 4 * i)) : Table{}; }
  // The union at slots 0 and 1: its type, and its value table (type 0 when absent).
  Union union_at(const Table& t) const {
    const uint8_t type = scalar<uint8_t>(t, 0);
    const Table value = type == 0 ? Table{} : child(t, 1);
    if (!value.present()) return {};
    return Union{type, value};
  }
  template <typename T>
  T scalar(const Table& t, unsigned slot) const {
    const uint32_t from = field(t, slot);
    return from == 0 ? T{} : at<T>(from);
  }
  const void* pointer(uint32_t offset) const { return offset ? base + offset : nullptr; }
  uint32_t offset_of(const void* p) const { return static_cast<uint32_t>(static_cast<const uint8_t*>(p) - base); }
};

// --- The program's tables, read verified ------------------------------------------------

// The value index of entry i of the plan's inputs or outputs (`slot`: schema::kInputs or
// kOutputs; i below their count).
uint32_t io_value(const Verified& v, uint32_t plan, unsigned slot, size_t i);

// A verified Tensor table, decoded: the one decoding of a tensor's type and shape that
// Program::input/output and Method::create share.
TensorInfo tensor_info(const Verified& v, const Table& tensor, uint32_t value_index);

}  // namespace kiln::runtime::fb
