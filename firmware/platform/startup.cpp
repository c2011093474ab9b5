// Reset and the vector table.
//
// Contract with the generated linker script (kiln.boards.linker_script):
// __data_load/__data_start/__data_end and __bss_start/__bss_end are word
// aligned; __stack_limit/__stack_top bound the main stack (8-byte aligned);
// __init_array_start/__init_array_end list C++ static constructors.
#include <cstdint>

#include "armv8m.h"
#include "kiln/platform.h"
#include "kiln_board.h"
#include "platform_internal.h"

extern "C" {
extern uint32_t __data_load[], __data_start[], __data_end[];
extern uint32_t __bss_start[], __bss_end[];
extern uint32_t __stack_limit[], __stack_top[];
extern void (*__init_array_start[])();
extern void (*__init_array_end[])();

int main();
void kiln_reset_handler();
void kiln_fault_entry();  // fault.cpp: reports any fault or unexpected exception
}

// The NPU driver overrides this; until then the NPU interrupt is unexpected and
// reported like a fault (a branch keeps EXC_RETURN in LR for the report).
extern "C" __attribute__((weak, naked)) void kiln_npu_irq_handler() { __asm volatile("b kiln_fault_entry"); }

namespace {

using Handler = void (*)();
constexpr int kSystemExceptions = 16;
// The external interrupts the table lists: up to the NPU's (a board without an NPU, none).
#ifdef KILN_NPU_IRQ
constexpr int kInterrupts = KILN_NPU_IRQ + 1;
#else
constexpr int kInterrupts = 0;
#endif

struct VectorTable {
  uint32_t* initial_sp;
  Handler handlers[kSystemExceptions - 1 + kInterrupts];
};

constexpr VectorTable make_vector_table() {
  VectorTable table{__stack_top, {}};
  for (Handler& h : table.handlers) h = kiln_fault_entry;
  table.handlers[0] = kiln_reset_handler;  // exception 1
#ifdef KILN_NPU_IRQ
  table.handlers[kSystemExceptions - 1 + KILN_NPU_IRQ] = kiln_npu_irq_handler;
#endif
  return table;
}

}  // namespace

// Placed first in the code region; aligned for VTOR.
__attribute__((section(".vectors"), used)) const VectorTable kiln_vectors = make_vector_table();

extern "C" __attribute__((noreturn)) void kiln_reset_handler() {
  using namespace kiln::armv8m;
  // FPU and Helium first: the compiler may use them in anything that follows.
  reg(kCpacr) |= kCpacrCp10Cp11Full;
  dsb();
  isb();
  // Stack overflow faults (UsageFault STKOF) instead of corrupting .bss; the
  // fault handler lowers the limit to use the reserve below it.
  // Armv7-M (Cortex-M4, M7) has no stack limit: an overflow there goes unnoticed.
  set_msplim(reinterpret_cast<uint32_t>(__stack_limit) + kiln::platform::kFaultStackReserve);

  for (uint32_t *src = __data_load, *dst = __data_start; dst < __data_end;) *dst++ = *src++;
  for (uint32_t* dst = __bss_start; dst < __bss_end;) *dst++ = 0;

  reg(kVtor) = reinterpret_cast<uint32_t>(&kiln_vectors);
  reg(kShcsr) |= kShcsrFaultsEnable;
  reg(kCcr) |= kCcrDiv0Trap;
  dsb();
  isb();

  kiln::platform::uart_init();
  for (auto* ctor = __init_array_start; ctor < __init_array_end; ++ctor) (*ctor)();
  kiln::exit(main());
}
