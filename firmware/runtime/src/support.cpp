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

namespace {

constexpr uint8_t kChannelsLastOrder[4] = {0, 2, 3, 1};

// Whether `dim_order`, its dims of size 1 left out, is `want`'s (`dim` entries each).
bool same_non_unit_order(const int32_t* sizes, const uint8_t* dim_order, const uint8_t* want, size_t dim) {
  size_t j = 0;
  for (size_t i = 0; i < dim; ++i) {
    if (dim_order[i] >= dim || sizes[dim_order[i]] == 1) continue;
    while (j < dim && sizes[want[j]] == 1) ++j;
    if (j == dim || want[j] != dim_order[i]) return false;
    ++j;
  }
  return true;
}

}  // namespace

bool dim_order_of(const int32_t* sizes, const uint8_t* dim_order, size_t dim, DimOrder* order) {
  uint8_t identity[kMaxDims];
  bool seen[kMaxDims] = {}, is_identity = true, is_channels_last = dim == 4;
  if (dim > kMaxDims) return false;
  for (size_t i = 0; i < dim; ++i) {
    if (dim_order[i] >= dim || seen[dim_order[i]]) return false;  // not a permutation
    seen[dim_order[i]] = true;
    identity[i] = static_cast<uint8_t>(i);
    is_identity = is_identity && dim_order[i] == i;
    is_channels_last = is_channels_last && dim_order[i] == kChannelsLastOrder[i];
  }
  if (is_identity || is_channels_last) {  // as written, even where both give the same bytes
    *order = is_identity ? DimOrder::kContiguous : DimOrder::kChannelsLast;
    return true;
  }
  if (same_non_unit_order(sizes, dim_order, identity, dim)) {
    *order = DimOrder::kContiguous;
    return true;
  }
  if (dim == 4 && same_non_unit_order(sizes, dim_order, kChannelsLastOrder, dim)) {
    *order = DimOrder::kChannelsLast;
    return true;
  }
  return false;
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
