// Small shared pieces: StringView, element sizes, table look-ups, list items.
#include <cstring>

#include "kiln/runtime/backend.h"
#include "kiln/runtime/kernel.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/types.h"

namespace kiln::runtime {

StringView::StringView(const char* c_string) : data(c_string), size(std::strlen(c_string)) {}

bool StringView::operator==(const StringView& other) const {
  return size == other.size && (size == 0 || std::memcmp(data, other.data, size) == 0);
}

size_t element_size(int8_t type) {
  switch (static_cast<ScalarType>(type)) {
    case ScalarType::kByte: case ScalarType::kChar: case ScalarType::kBool:
    case ScalarType::kQInt8: case ScalarType::kQUInt8: case ScalarType::kQUInt4x2:
    case ScalarType::kQUInt2x4: case ScalarType::kFloat8e5m2: case ScalarType::kFloat8e4m3fn:
    case ScalarType::kFloat8e5m2fnuz: case ScalarType::kFloat8e4m3fnuz:
      return 1;
    case ScalarType::kShort: case ScalarType::kHalf: case ScalarType::kBFloat16:
    case ScalarType::kBits16: case ScalarType::kUInt16:
      return 2;
    case ScalarType::kInt: case ScalarType::kFloat: case ScalarType::kQInt32:
    case ScalarType::kUInt32:
      return 4;
    case ScalarType::kLong: case ScalarType::kDouble: case ScalarType::kUInt64:
      return 8;
  }
  return 0;
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
