// Internal interfaces between the platform layer's files.
#pragma once

#include <cstdint>

namespace kiln::platform {

// Bytes kept below the main stack's limit for the fault handler (MSPLIM is set
// this far above __stack_limit).
constexpr uint32_t kFaultStackReserve = 512;

void uart_init();
void uart_put(char c);

// Reports `status` to the debugger/simulator through semihosting
// (SYS_EXIT_EXTENDED); does not return.
[[noreturn]] void semihosting_exit(int status);

}  // namespace kiln::platform
