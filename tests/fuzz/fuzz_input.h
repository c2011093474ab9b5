// What the fuzz targets share: the input copied into a buffer of exactly its size at a
// 16-byte aligned address (the runtime's alignment contract; exactly its size, so
// AddressSanitizer reports any read past the end), and a trap for a broken promise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::fuzz {

// Heap memory of exactly `size` bytes (at least one is allocated), 16- or `alignment`-byte
// aligned; owned, freed on destruction.
class Buffer {
 public:
  explicit Buffer(size_t size, size_t alignment = 16) : size_(size) {
    if (posix_memalign(reinterpret_cast<void**>(&data_), alignment, size ? size : 1) != 0) std::abort();
  }
  Buffer(const uint8_t* bytes, size_t size) : Buffer(size) {
    if (size) std::memcpy(data_, bytes, size);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// `inner` (size bytes) lies inside `outer` (outer_size bytes).
inline bool inside(const void* inner, size_t size, const void* outer, size_t outer_size) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(inner), b = reinterpret_cast<uintptr_t>(outer);
  return a >= b && a - b <= outer_size && size <= outer_size - (a - b);
}

// A promise of the code under test does not hold: a finding (libFuzzer saves the input).
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "kiln fuzz: broken promise: %s\n", what);
  std::abort();
}

}  // namespace kiln::fuzz
