// Host file access and the command line through Arm semihosting (BKPT 0xAB), as QEMU
// (-semihosting-config) and Arm's FVPs (cpu0.semihosting-*) provide them. Paths are
// the host's; relative ones resolve against the platform's working directory.
// Synchronous, no heap; every call blocks the CPU until the host answers. Part of the
// platform layer (semihosting.cpp), beside the semihosting exit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

// An open host file; closed by its destructor. Not copyable.
class HostFile {
 public:
  enum class Mode : uint32_t { kReadBinary = 1, kWriteBinary = 5 };

  HostFile() = default;
  ~HostFile();
  HostFile(const HostFile&) = delete;
  HostFile& operator=(const HostFile&) = delete;

  // false if the host cannot open `path` (NUL-terminated) in `mode`.
  bool open(const char* path, Mode mode);
  bool is_open() const { return handle_ >= 0; }
  // The file's length in bytes; -1 if unknown.
  int32_t length() const;
  // Reads exactly `size` bytes at the current position; false on a short read.
  bool read(void* buffer, size_t size) const;
  // Writes all `size` bytes; false if the host could not.
  bool write(const void* data, size_t size) const;
  void close();

 private:
  int32_t handle_ = -1;
};

// The command line the platform passes (QEMU's -semihosting-config arg=..., the
// FVP's cpu0.semihosting-cmd_line), NUL-terminated in `buffer`; false if there is
// none or it does not fit in `capacity` bytes.
bool command_line(char* buffer, size_t capacity);

}  // namespace kiln
