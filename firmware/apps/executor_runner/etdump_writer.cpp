#include "etdump_writer.h"

#include <cstring>

namespace kiln::etdump {
namespace {

using runtime::Error;
using runtime::ErrorCode;

// Each table's inline layout: byte offsets from the table's start (its soffset to the vtable at
// 0), in the schema's field order; 0 in a vtable marks a field absent.
namespace etdump_table {  // ETDump { version: uint; run_data: [RunData] }
constexpr uint16_t kVersion = 4, kRunData = 8, kSize = 12;
}
namespace run_table {  // RunData { name; bundled_input_index; allocators; events }
constexpr uint16_t kName = 4, kEvents = 8, kSize = 12;
}
namespace event_table {  // Event { profile_event; allocation_event; debug_event }
constexpr uint16_t kProfileEvent = 4, kSize = 8;
}
namespace profile_table {  // ProfileEvent: the 64-bit times last, 8-byte aligned in an 8-aligned table
constexpr uint16_t kName = 4, kChainIndex = 8, kInstructionId = 12, kDebugIdInt = 16, kDebugIdStr = 20, kStartTime = 24,
                   kEndTime = 32, kSize = 40;
}

// A forward cursor over out[0, capacity): it places every object at its alignment and keeps
// counting past the capacity (so the length it ends at is the length needed) but stores bytes
// only inside it.
class Cursor {
 public:
  Cursor(uint8_t* out, size_t capacity) : out_(out), capacity_(capacity) {}

  size_t length() const { return at_; }

  // n zeroed bytes at the next multiple of `align` (a power of two); their offset.
  size_t reserve(size_t n, size_t align) {
    const size_t start = (at_ + align - 1) & ~(align - 1);
    const size_t end = start + n;
    if (at_ < capacity_) std::memset(out_ + at_, 0, (end < capacity_ ? end : capacity_) - at_);
    at_ = end;
    return start;
  }

  void put(size_t at, const void* bytes, size_t n) {
    if (at <= capacity_ && n <= capacity_ - at) std::memcpy(out_ + at, bytes, n);
  }
  // Little-endian, as FlatBuffers stores scalars.
  void put_le(size_t at, uint64_t value, size_t n) {
    uint8_t bytes[8];
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    put(at, bytes, n);
  }
  void put32(size_t at, uint32_t value) { put_le(at, value, 4); }
  // A uoffset at `field` to `target` (which lies after it).
  void link(size_t field, size_t target) { put32(field, static_cast<uint32_t>(target - field)); }

  // A vtable for `slots` fields at `offsets` (0: absent), then a table of `size` bytes aligned at
  // `align` (4 or 8) whose soffset points back at the vtable; the table's offset.
  size_t table(const uint16_t* offsets, uint16_t slots, uint16_t size, size_t align) {
    const size_t vtable = reserve(4 + 2 * size_t{slots}, 2);
    put_le(vtable, 4 + 2 * uint32_t{slots}, 2);
    put_le(vtable + 2, size, 2);
    for (uint16_t i = 0; i < slots; ++i) put_le(vtable + 4 + 2 * i, offsets[i], 2);
    const size_t at = reserve(size, align);
    put32(at, static_cast<uint32_t>(at - vtable));  // soffset: vtable = table - soffset
    return at;
  }

  // A string (length, bytes, NUL); its offset.
  size_t string(const char* text) {
    const size_t n = std::strlen(text);
    const size_t at = reserve(4 + n + 1, 4);
    put32(at, static_cast<uint32_t>(n));
    put(at + 4, text, n);
    return at;
  }

  // A vector of `count` uoffsets (filled by link at element(i)); its offset.
  size_t offsets(size_t count) {
    const size_t at = reserve(4 + 4 * count, 4);
    put32(at, static_cast<uint32_t>(count));
    return at;
  }
  static size_t element(size_t vector, size_t i) { return vector + 4 + 4 * i; }

 private:
  uint8_t* out_;
  size_t capacity_;
  size_t at_ = 0;
};

// The ProfileEvent's vtable, table and strings; the table's offset.
size_t write_profile_event(Cursor& c, const ProfileEvent& e) {
  using namespace profile_table;
  const uint16_t offsets[] = {e.name ? kName : uint16_t{0},
                              kChainIndex,
                              kInstructionId,
                              kDebugIdInt,
                              e.delegate_debug_id_str ? kDebugIdStr : uint16_t{0},
                              0,  // delegate_debug_metadata
                              kStartTime,
                              kEndTime};
  const size_t at = c.table(offsets, sizeof(offsets) / sizeof(offsets[0]), kSize, 8);
  c.put32(at + kChainIndex, static_cast<uint32_t>(e.chain_index));
  c.put32(at + kInstructionId, static_cast<uint32_t>(e.instruction_id));
  c.put32(at + kDebugIdInt, static_cast<uint32_t>(e.delegate_debug_id_int));
  c.put_le(at + kStartTime, e.start_time, 8);
  c.put_le(at + kEndTime, e.end_time, 8);
  if (e.name) c.link(at + kName, c.string(e.name));
  if (e.delegate_debug_id_str) c.link(at + kDebugIdStr, c.string(e.delegate_debug_id_str));
  return at;
}

void write_run(Cursor& c, const Run& run, size_t at_slot) {
  const uint16_t offsets[] = {run_table::kName, 0, 0, run_table::kEvents};
  const size_t at = c.table(offsets, 4, run_table::kSize, 4);
  c.link(at_slot, at);
  c.link(at + run_table::kName, c.string(run.name));
  const size_t events = c.offsets(run.event_count);
  c.link(at + run_table::kEvents, events);
  for (size_t i = 0; i < run.event_count; ++i) {
    const uint16_t slot[] = {event_table::kProfileEvent};
    const size_t event = c.table(slot, 1, event_table::kSize, 4);
    c.link(Cursor::element(events, i), event);
    c.link(event + event_table::kProfileEvent, write_profile_event(c, run.events[i]));
  }
}

}  // namespace

runtime::Result<size_t> write(const Run* runs, size_t run_count, uint8_t* out, size_t capacity) {
  if (out == nullptr && capacity != 0) return Error{ErrorCode::kInvalidArgument, 0, 0};
  for (size_t r = 0; r < run_count; ++r) {
    const uint32_t index = static_cast<uint32_t>(r);
    if (runs[r].name == nullptr) return Error{ErrorCode::kInvalidArgument, 1, index};
    if (runs[r].event_count != 0 && runs[r].events == nullptr) return Error{ErrorCode::kInvalidArgument, 2, index};
  }
  Cursor c(out, capacity);
  const size_t prefix = c.reserve(4, 4);
  const size_t root = c.reserve(4, 4);
  c.put(c.reserve(4, 1), "ED00", 4);
  const uint16_t offsets[] = {etdump_table::kVersion, etdump_table::kRunData};
  const size_t etdump = c.table(offsets, 2, etdump_table::kSize, 4);
  c.link(root, etdump);
  c.put32(etdump + etdump_table::kVersion, kVersion);
  const size_t run_data = c.offsets(run_count);
  c.link(etdump + etdump_table::kRunData, run_data);
  for (size_t r = 0; r < run_count; ++r) write_run(c, runs[r], Cursor::element(run_data, r));
  c.reserve(0, 8);  // the whole buffer a multiple of its largest alignment
  const size_t length = c.length();
  if (length > capacity)
    return Error{ErrorCode::kTooLarge, static_cast<uint32_t>(length), static_cast<uint32_t>(capacity)};
  c.put32(prefix, static_cast<uint32_t>(length - 4));
  return length;
}

}  // namespace kiln::etdump
