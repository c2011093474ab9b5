// kiln's bare-metal platform layer: startup, console and exit for one board.
// No heap, no exceptions; everything is polled and synchronous.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

// Writes `length` bytes to the board's UART, blocking until each is accepted.
void write(const char* text, std::size_t length);

// printf-like output to the UART. Supports %d %u %x %X %s %c %% with an
// optional '0' flag and width (e.g. %08x). Lines go out as they are formed.
void print(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Ends the program: prints the exit line the host runner reads
// ("[kiln] exit <status>") and reports `status` through semihosting.
[[noreturn]] void exit(int status);

// Exit status used when the CPU faults (the runner reports the fault).
constexpr int kFaultExitStatus = 134;

}  // namespace kiln
