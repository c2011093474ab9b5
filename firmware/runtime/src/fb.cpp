// fb::Verifier: the checks of the loader's reads, and the errors each gives.
#include "fb.h"

namespace kiln::runtime::fb {

void Verifier::check_index(int64_t index, uint32_t count) {
  if (index < 0 || index >= count) fail(Error{ErrorCode::kPteBadIndex, static_cast<uint32_t>(index), count});
}

bool Verifier::readable(uint64_t at, uint64_t n) {
  if (!ok()) return false;
  if (contains(at, n)) return true;
  fail(Error{ErrorCode::kPteOutOfBounds, static_cast<uint32_t>(at), size_});
  return false;
}

void Verifier::spend(uint64_t n, uint32_t at) {
  budget_ -= static_cast<int64_t>(n);
  if (budget_ < 0) fail(Error{ErrorCode::kPteTooComplex, at, size_});
}

// A table at `pos`: 4-byte aligned (else kPteMisaligned, a = pos, b = 4), its vtable
// before it at an even offset, at least 4 bytes, inside the part (else kPteBadTable,
// a = the vtable's offset, b = its size), and the table at least 4 bytes inside the part
// (else kPteBadTable, a = pos, b = its size).
Table Verifier::table(uint64_t pos) {
  const int32_t back = read<int32_t>(pos);
  if (!ok()) return {};
  if (pos == 0 || pos % 4 != 0) {
    fail(Error{ErrorCode::kPteMisaligned, static_cast<uint32_t>(pos), 4});
    return {};
  }
  const int64_t vtable = static_cast<int64_t>(pos) - back;
  if (vtable < 0 || vtable % 2 != 0) {
    fail(Error{ErrorCode::kPteBadTable, static_cast<uint32_t>(pos), 0});
    return {};
  }
  const uint16_t vt_size = read<uint16_t>(static_cast<uint64_t>(vtable));
  const uint16_t obj_size = read<uint16_t>(static_cast<uint64_t>(vtable) + 2);
  if (!ok()) return {};
  if (vt_size < 4 || vt_size % 2 != 0 || !contains(static_cast<uint64_t>(vtable), vt_size)) {
    fail(Error{ErrorCode::kPteBadTable, static_cast<uint32_t>(vtable), vt_size});
    return {};
  }
  if (obj_size < 4 || !contains(pos, obj_size)) {
    fail(Error{ErrorCode::kPteBadTable, static_cast<uint32_t>(pos), obj_size});
    return {};
  }
  spend(vt_size + obj_size, static_cast<uint32_t>(pos));
  if (!ok()) return {};
  Table t;
  t.pos = static_cast<uint32_t>(pos);
  t.vtable = static_cast<uint32_t>(vtable);
  t.vt_size = vt_size;
  t.obj_size = obj_size;
  return t;
}

// kPteBadTable (a = the table's offset, b = the field's) for a field that starts outside its table.
uint32_t Verifier::field(const Table& t, unsigned slot) {
  const uint32_t entry = 4 + 2 * slot;
  if (!t.present() || entry + 2 > t.vt_size) return 0;
  const uint16_t voffset = read<uint16_t>(t.vtable + entry);
  if (voffset == 0) return 0;
  // Only the start is checked against the object size: writers (ExecuTorch's too)
  // record object sizes that can end before an 8-byte field does; reads check the
  // part's bounds themselves.
  if (voffset < 4 || voffset >= t.obj_size) {
    fail(Error{ErrorCode::kPteBadTable, t.pos, voffset});
    return 0;
  }
  return t.pos + voffset;
}

// Where the offset field `slot` points: 4 readable bytes (else kPteOutOfBounds), or 0 when absent.
uint32_t Verifier::target(const Table& t, unsigned slot) {
  const uint32_t at = field(t, slot);
  if (at == 0) return 0;
  const uint32_t offset = read<uint32_t>(at);
  const uint64_t to = static_cast<uint64_t>(at) + offset;
  if (!readable(to, 4)) return 0;
  return static_cast<uint32_t>(to);
}

Table Verifier::child(const Table& t, unsigned slot) {
  const uint32_t to = target(t, slot);
  return to == 0 ? Table{} : table(to);
}

// A vector: its length word 4-byte aligned (else kPteMisaligned, a = its offset, b = 4), its
// elements inside the part (else kPteOutOfBounds, a = their start) and aligned to their size
// (else kPteMisaligned, a = their start, b = the size).
Vector Verifier::vector(const Table& t, unsigned slot, uint32_t elem_size) {
  const uint32_t to = target(t, slot);
  if (to == 0) return {};
  if (to % 4 != 0) {
    fail(Error{ErrorCode::kPteMisaligned, to, 4});
    return {};
  }
  const uint32_t count = read<uint32_t>(to);
  const uint32_t start = to + 4;
  const uint64_t bytes = static_cast<uint64_t>(count) * elem_size;
  if (!readable(start, bytes)) return {};
  if (elem_size > 1 && count > 0 && start % elem_size != 0) {
    fail(Error{ErrorCode::kPteMisaligned, start, elem_size});
    return {};
  }
  spend(bytes + 4, start);
  if (!ok()) return {};
  return Vector{count ? start : 0, count};
}

// A string without its NUL terminator (the byte after it outside the part, or not 0):
// kPteBadString, a = its offset. An empty string still has its terminator; an absent one
// has nothing.
void Verifier::string(const Table& t, unsigned slot) {
  const Vector v = vector(t, slot, 1);
  if (v.count == 0) return;
  const uint64_t end = static_cast<uint64_t>(v.start) + v.count;
  if (!contains(end, 1) || base_[end] != 0) fail(Error{ErrorCode::kPteBadString, v.start, 0});
}

Table Verifier::element(const Vector& v, uint32_t i) {
  const uint64_t at = static_cast<uint64_t>(v.start) + 4ull * i;
  const uint32_t offset = read<uint32_t>(at);
  if (!ok()) return {};
  return table(at + offset);
}

// kPteMissingField (a = the table's offset, b = slot + 1) for a type without its value.
Union Verifier::union_at(const Table& t, unsigned slot) {
  const uint8_t type = scalar<uint8_t>(t, slot);
  if (type == 0) return {};
  const Table value = child(t, slot + 1);
  if (!value.present()) {
    fail(Error{ErrorCode::kPteMissingField, t.pos, slot + 1});
    return {};
  }
  return Union{type, value};
}

}  // namespace kiln::runtime::fb
