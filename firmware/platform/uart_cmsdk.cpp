// Arm CMSDK APB UART (Corstone-300/320 UART0): polled transmit only.
// Register layout: DATA 0x00, STATE 0x04 (bit 0: TX buffer full), CTRL 0x08
// (bit 0: TX enable), BAUDDIV 0x10 (clock / baud, at least 16).
#include <cstdint>

#include "armv8m.h"
#include "kiln_board.h"
#include "platform_internal.h"

namespace kiln::platform {
namespace {
constexpr uint32_t kData = KILN_UART_BASE + 0x00;
constexpr uint32_t kState = KILN_UART_BASE + 0x04;
constexpr uint32_t kCtrl = KILN_UART_BASE + 0x08;
constexpr uint32_t kBaudDiv = KILN_UART_BASE + 0x10;
constexpr uint32_t kTxFull = 1u << 0;
constexpr uint32_t kTxEnable = 1u << 0;
}  // namespace

void uart_init() {
  armv8m::reg(kBaudDiv) = KILN_UART_CLOCK_HZ / KILN_UART_BAUD;
  armv8m::reg(kCtrl) = kTxEnable;
}

void uart_put(char c) {
  while (armv8m::reg(kState) & kTxFull) {
  }
  armv8m::reg(kData) = static_cast<uint8_t>(c);
}

}  // namespace kiln::platform
