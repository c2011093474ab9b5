// Small shared pieces: StringView, element sizes, table look-ups, list items.
#include <cstring>
#include <initializer_list>

#include "kiln/runtime/backend.h"
#include "kiln/runtime/kernel.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime {

StringView::StringView(const char* c_string) : data(c_string), size(std::strlen(c_string)) {}

bool StringView::operator==(const StringView& other) const {
  return size == other.size && (size == 0 || std::memcmp(data, other.data, size) == 0);
}

namespace {

// Bytes per element, by ScalarType code (0: a code that is not a ScalarType).
struct ElementSizes {
  static constexpr int kCodes = 30;  // ScalarType codes 0..29
  uint8_t bytes[kCodes] = {};
  constexpr void set(std::initializer_list<ScalarType> types, uint8_t n) {
    for (ScalarType t : types) bytes[static_cast<int>(t)] = n;
  }
};

constexpr ElementSizes kElementSizes = [] {
  using T = ScalarType;
  ElementSizes s;
  s.set({T::kByte, T::kChar, T::kBool, T::kQInt8, T::kQUInt8, T::kQUInt4x2, T::kQUInt2x4, T::kFloat8e5m2,
         T::kFloat8e4m3fn, T::kFloat8e5m2fnuz, T::kFloat8e4m3fnuz},
        1);
  s.set({T::kShort, T::kHalf, T::kBFloat16, T::kBits16, T::kUInt16}, 2);
  s.set({T::kInt, T::kFloat, T::kQInt32, T::kUInt32}, 4);
  s.set({T::kLong, T::kDouble, T::kUInt64}, 8);
  return s;
}();

}  // namespace

size_t element_size(int8_t type) {
  const auto code = static_cast<uint8_t>(type);
  return code < ElementSizes::kCodes ? kElementSizes.bytes[code] : 0;
}

bool dim_order_of(const int32_t* sizes, const uint8_t* dim_order, size_t dim, DimOrder* order) {
  // One pass: a permutation (each dim once), exactly 0, 2, 3, 1, and whether its dims of size
  // other than 1 come in the identity's order or in 0, 2, 3, 1's.
  static constexpr uint8_t kChannelsLast[4] = {0, 2, 3, 1};
  uint32_t seen = 0;
  bool exact = dim == 4, ascending = true, channels_last = dim == 4;
  int last = -1;
  size_t j = 0;  // the next of kChannelsLast's dims to match
  for (size_t i = 0; i < dim; ++i) {
    const uint8_t d = dim_order[i];
    if (d >= dim || (seen >> d & 1u) != 0) return false;
    seen |= 1u << d;
    exact = exact && d == kChannelsLast[i];
    if (sizes[d] == 1) continue;
    ascending = ascending && d > last;
    last = d;
    while (channels_last && j < 4 && sizes[kChannelsLast[j]] == 1) ++j;
    channels_last = channels_last && j < 4 && kChannelsLast[j++] == d;
  }
  *order = exact || (!ascending && channels_last) ? DimOrder::kChannelsLast : DimOrder::kContiguous;
  return exact || ascending || channels_last;
}

uint32_t element_index(DimOrder order, const int32_t* sizes, size_t dim, uint32_t k) {
  if (order == DimOrder::kContiguous || dim != 4) return k;
  const uint32_t c = static_cast<uint32_t>(sizes[1]), h = static_cast<uint32_t>(sizes[2]);
  const uint32_t w = static_cast<uint32_t>(sizes[3]);
  const uint32_t x = k % w, y = k / w % h, channel = k / (w * h) % c, n = k / (w * h * c);
  return ((n * h + y) * w + x) * c + channel;
}

const Backend* BackendTable::find(StringView id) const {
  for (size_t i = 0; i < count; ++i) {
    if (backends[i] != nullptr && StringView(backends[i]->id) == id) return backends[i];
  }
  return nullptr;
}

KernelFn KernelTable::find(StringView name, StringView overload) const {
  for (size_t i = 0; i < count; ++i) {
    if (StringView(entries[i].name) == name && StringView(entries[i].overload) == overload) {
      return entries[i].fn;
    }
  }
  return nullptr;
}

int64_t KernelArgs::int_item(const Value& list, size_t j) const {
  int64_t index;
  std::memcpy(&index, static_cast<const uint8_t*>(list.list.items) + 8 * j, sizeof index);
  return values_[index].i;
}

Tensor& KernelArgs::tensor_item(const Value& list, size_t j) const {
  int32_t index;
  std::memcpy(&index, static_cast<const uint8_t*>(list.list.items) + 4 * j, sizeof index);
  return values_[index].t;
}

}  // namespace kiln::runtime
