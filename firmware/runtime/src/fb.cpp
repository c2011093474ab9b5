#include "fb.h"

namespace kiln::runtime::fb {

Result<Table> table_at(Reader& r, uint64_t pos) {
  Result<int32_t> back = r.read<int32_t>(pos);
  if (!back.ok()) return back.error();
  if (pos == 0 || pos % 4 != 0) return Error{ErrorCode::kPteMisaligned, static_cast<uint32_t>(pos), 4};
  int64_t vtable = static_cast<int64_t>(pos) - back.value();
  if (vtable < 0 || vtable % 2 != 0) {
    return Error{ErrorCode::kPteBadTable, static_cast<uint32_t>(pos), 0};
  }
  Result<uint16_t> vt_size = r.read<uint16_t>(static_cast<uint64_t>(vtable));
  Result<uint16_t> obj_size = r.read<uint16_t>(static_cast<uint64_t>(vtable) + 2);
  if (!vt_size.ok()) return vt_size.error();
  if (!obj_size.ok()) return obj_size.error();
  if (vt_size.value() < 4 || vt_size.value() % 2 != 0 ||
      !r.contains(static_cast<uint64_t>(vtable), vt_size.value())) {
    return Error{ErrorCode::kPteBadTable, static_cast<uint32_t>(vtable), vt_size.value()};
  }
  if (obj_size.value() < 4 || !r.contains(pos, obj_size.value())) {
    return Error{ErrorCode::kPteBadTable, static_cast<uint32_t>(pos), obj_size.value()};
  }
  Status spent = r.spend(vt_size.value() + obj_size.value(), static_cast<uint32_t>(pos));
  if (!spent.ok()) return spent.error();
  Table t;
  t.pos = static_cast<uint32_t>(pos);
  t.vtable = static_cast<uint32_t>(vtable);
  t.vt_size = vt_size.value();
  t.obj_size = obj_size.value();
  return t;
}

Result<uint32_t> field(const Reader& r, const Table& t, unsigned slot) {
  uint32_t entry = 4 + 2 * slot;
  if (!t.present() || entry + 2 > t.vt_size) return 0u;
  Result<uint16_t> voffset = r.read<uint16_t>(t.vtable + entry);
  if (!voffset.ok()) return voffset.error();
  if (voffset.value() == 0) return 0u;
  // Only the start is checked against the object size: writers (ExecuTorch's too)
  // record object sizes that can end before an 8-byte field does; reads check the
  // buffer's bounds themselves.
  if (voffset.value() < 4 || voffset.value() >= t.obj_size) {
    return Error{ErrorCode::kPteBadTable, t.pos, voffset.value()};
  }
  return t.pos + voffset.value();
}

static Result<uint32_t> target(const Reader& r, const Table& t, unsigned slot) {
  Result<uint32_t> at = field(r, t, slot);
  if (!at.ok() || at.value() == 0) return at;
  Result<uint32_t> offset = r.read<uint32_t>(at.value());
  if (!offset.ok()) return offset.error();
  uint64_t to = static_cast<uint64_t>(at.value()) + offset.value();
  if (!r.contains(to, 4)) return Error{ErrorCode::kPteOutOfBounds, static_cast<uint32_t>(to), r.size};
  return static_cast<uint32_t>(to);
}

Result<Table> child(Reader& r, const Table& t, unsigned slot) {
  Result<uint32_t> to = target(r, t, slot);
  if (!to.ok()) return to.error();
  if (to.value() == 0) return Table{};
  return table_at(r, to.value());
}

Result<Vector> vector(Reader& r, const Table& t, unsigned slot, uint32_t elem_size) {
  Result<uint32_t> to = target(r, t, slot);
  if (!to.ok()) return to.error();
  if (to.value() == 0) return Vector{};
  if (to.value() % 4 != 0) return Error{ErrorCode::kPteMisaligned, to.value(), 4};
  Result<uint32_t> count = r.read<uint32_t>(to.value());
  if (!count.ok()) return count.error();
  uint32_t start = to.value() + 4;
  uint64_t bytes = static_cast<uint64_t>(count.value()) * elem_size;
  if (!r.contains(start, bytes)) return Error{ErrorCode::kPteOutOfBounds, start, r.size};
  if (elem_size > 1 && count.value() > 0 && start % elem_size != 0) {
    return Error{ErrorCode::kPteMisaligned, start, elem_size};
  }
  Status spent = r.spend(bytes + 4, start);
  if (!spent.ok()) return spent.error();
  return Vector{count.value() ? start : 0, count.value()};
}

Result<StringView> string(Reader& r, const Table& t, unsigned slot) {
  Result<Vector> v = vector(r, t, slot, 1);
  if (!v.ok()) return v.error();
  if (v.value().count == 0) {
    // An empty string still has its terminator; an absent one has nothing.
    return StringView{};
  }
  Result<uint8_t> nul = r.read<uint8_t>(static_cast<uint64_t>(v.value().start) + v.value().count);
  if (!nul.ok() || nul.value() != 0) return Error{ErrorCode::kPteBadString, v.value().start, 0};
  return StringView{reinterpret_cast<const char*>(r.base + v.value().start), v.value().count};
}

Result<Table> element(Reader& r, const Vector& v, uint32_t i) {
  uint64_t at = static_cast<uint64_t>(v.start) + 4ull * i;
  Result<uint32_t> offset = r.read<uint32_t>(at);
  if (!offset.ok()) return offset.error();
  return table_at(r, at + offset.value());
}

Result<Union> union_at(Reader& r, const Table& t, unsigned slot) {
  Result<uint8_t> type = scalar<uint8_t>(r, t, slot);
  if (!type.ok()) return type.error();
  if (type.value() == 0) return Union{};
  Result<Table> value = child(r, t, slot + 1);
  if (!value.ok()) return value.error();
  if (!value.value().present()) return Error{ErrorCode::kPteMissingField, t.pos, slot + 1};
  return Union{type.value(), value.value()};
}

}  // namespace kiln::runtime::fb
