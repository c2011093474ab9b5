// Arm semihosting (BKPT 0xAB on M-profile): r0 = operation, r1 = parameter block.
// Honoured by QEMU (-semihosting-config enable=on) and Arm's FVPs
// (cpu0.semihosting-enable=1). The exit (platform_internal.h) and the host files and
// command line (kiln/host_file.h) share the one trap below.
#include <cstdint>
#include <cstring>

#include "kiln/host_file.h"
#include "platform_internal.h"

namespace kiln {
namespace {
constexpr uint32_t kSysOpen = 0x01, kSysClose = 0x02, kSysWrite = 0x05, kSysRead = 0x06;
constexpr uint32_t kSysFlen = 0x0C, kSysGetCmdline = 0x15;
constexpr uint32_t kSysExit = 0x18;
constexpr uint32_t kSysExitExtended = 0x20;
constexpr uint32_t kAdpStoppedApplicationExit = 0x20026;
constexpr uint32_t kAdpStoppedRunTimeErrorUnknown = 0x20023;

uint32_t semihost(uint32_t operation, const void* parameter) {
  register uint32_t r0 __asm("r0") = operation;
  register const void* r1 __asm("r1") = parameter;
  __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

uint32_t word(const void* pointer) { return reinterpret_cast<uint32_t>(pointer); }
}  // namespace

namespace platform {

void semihosting_exit(int status) {
  const uint32_t block[2] = {kAdpStoppedApplicationExit, static_cast<uint32_t>(status)};
  semihost(kSysExitExtended, block);
  // A host without SYS_EXIT_EXTENDED: plain SYS_EXIT (status reads 0 or 1).
  semihost(kSysExit,
           reinterpret_cast<const void*>(status == 0 ? kAdpStoppedApplicationExit : kAdpStoppedRunTimeErrorUnknown));
  for (;;) __asm volatile("wfi");
}

}  // namespace platform

HostFile::~HostFile() { close(); }

bool HostFile::open(const char* path, Mode mode) {
  close();
  const uint32_t block[3] = {word(path), static_cast<uint32_t>(mode), static_cast<uint32_t>(std::strlen(path))};
  handle_ = static_cast<int32_t>(semihost(kSysOpen, block));
  return handle_ >= 0;
}

int32_t HostFile::length() const {
  const uint32_t block[1] = {static_cast<uint32_t>(handle_)};
  return static_cast<int32_t>(semihost(kSysFlen, block));
}

// SYS_READ and SYS_WRITE return the number of bytes NOT transferred.
bool HostFile::read(void* buffer, size_t size) const {
  const uint32_t block[3] = {static_cast<uint32_t>(handle_), word(buffer), static_cast<uint32_t>(size)};
  return semihost(kSysRead, block) == 0;
}

bool HostFile::write(const void* data, size_t size) const {
  const uint32_t block[3] = {static_cast<uint32_t>(handle_), word(data), static_cast<uint32_t>(size)};
  return semihost(kSysWrite, block) == 0;
}

void HostFile::close() {
  if (handle_ < 0) return;
  const uint32_t block[1] = {static_cast<uint32_t>(handle_)};
  semihost(kSysClose, block);
  handle_ = -1;
}

bool command_line(char* buffer, size_t capacity) {
  uint32_t block[2] = {word(buffer), static_cast<uint32_t>(capacity)};
  if (semihost(kSysGetCmdline, block) != 0) return false;
  if (block[1] >= capacity) return false;
  buffer[block[1]] = '\0';
  return true;
}

}  // namespace kiln
