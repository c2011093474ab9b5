// Synopsys DesignWare APB UART (DW_apb_uart), 16550-compatible, as on Alif Ensemble
// (board.toml's uart.kind "dw-apb-uart"): polled transmit only, 8 data bits, no parity,
// 1 stop bit. Registers are 32 bits apart (Linux's "uart8250,mmio32" for this UART):
//   0x00 THR (write; DLL while LCR.DLAB)   0x04 IER (DLH while LCR.DLAB)
//   0x08 FCR (write)                       0x0C LCR: bits 1..0 word length (3: 8 bits),
//                                                    bit 7 DLAB (divisor latch access)
//   0x14 LSR: bit 5 THRE (transmit holding register empty)
//   0x7C USR: bit 0 BUSY (LCR and the divisor may be written only while not busy)
// Divisor = clock / (16 * baud), rounded to nearest (the DW UART's 16x oversampling).
// What this driver does not do: enable the UART's clock or route its pins. On Alif the
// UART's clock gate and the pads' multiplexer are SoC registers outside the UART (the
// board description says so under [unverified]).
#include <cstdint>

#include "armv8m.h"
#include "kiln_board.h"
#include "platform_internal.h"

namespace kiln::platform {
namespace {
constexpr uint32_t kThr = KILN_UART_BASE + 0x00;
constexpr uint32_t kDll = KILN_UART_BASE + 0x00;
constexpr uint32_t kDlh = KILN_UART_BASE + 0x04;
constexpr uint32_t kIer = KILN_UART_BASE + 0x04;
constexpr uint32_t kFcr = KILN_UART_BASE + 0x08;
constexpr uint32_t kLcr = KILN_UART_BASE + 0x0C;
constexpr uint32_t kLsr = KILN_UART_BASE + 0x14;
constexpr uint32_t kUsr = KILN_UART_BASE + 0x7C;
constexpr uint32_t kLcr8N1 = 0x3;
constexpr uint32_t kLcrDlab = 1u << 7;
constexpr uint32_t kFcrEnableAndReset = 0x7;  // FIFO enable, reset receive and transmit FIFOs
constexpr uint32_t kLsrThre = 1u << 5;
constexpr uint32_t kUsrBusy = 1u << 0;
constexpr uint32_t kDivisor = (KILN_UART_CLOCK_HZ + 8u * KILN_UART_BAUD) / (16u * KILN_UART_BAUD);
static_assert(kDivisor >= 1 && kDivisor <= 0xFFFF, "the board's UART clock and baud give no 16-bit divisor");
}  // namespace

void uart_init() {
  armv8m::reg(kIer) = 0;  // polled: no UART interrupts
  while (armv8m::reg(kUsr) & kUsrBusy) {
  }
  armv8m::reg(kLcr) = kLcr8N1 | kLcrDlab;
  armv8m::reg(kDll) = kDivisor & 0xFF;
  armv8m::reg(kDlh) = kDivisor >> 8;
  armv8m::reg(kLcr) = kLcr8N1;
  armv8m::reg(kFcr) = kFcrEnableAndReset;
}

void uart_put(char c) {
  while (!(armv8m::reg(kLsr) & kLsrThre)) {
  }
  armv8m::reg(kThr) = static_cast<uint8_t>(c);
}

}  // namespace kiln::platform
