// Non-owning views: Span<T> (pointer + count) and StringView (bytes, not
// necessarily NUL-terminated). Neither owns or copies; the viewed memory must
// outlive the view (for views into a .pte: as long as the .pte bytes).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::runtime {

template <typename T>
struct Span {
  T* data = nullptr;
  size_t size = 0;

  constexpr Span() = default;
  constexpr Span(T* d, size_t n) : data(d), size(n) {}
  template <size_t N>
  constexpr Span(T (&array)[N]) : data(array), size(N) {}  // NOLINT: implicit on purpose
  constexpr T& operator[](size_t i) const { return data[i]; }
  constexpr T* begin() const { return data; }
  constexpr T* end() const { return data + size; }
  constexpr bool empty() const { return size == 0; }
};

struct StringView {
  const char* data = nullptr;
  size_t size = 0;

  constexpr StringView() = default;
  constexpr StringView(const char* d, size_t n) : data(d), size(n) {}
  // From a NUL-terminated literal or C string.
  StringView(const char* c_string);  // NOLINT: implicit on purpose
  bool operator==(const StringView& other) const;
  bool operator!=(const StringView& other) const { return !(*this == other); }
};

}  // namespace kiln::runtime
