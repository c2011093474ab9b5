// Fault and unexpected-exception reporting.
//
// Every fault vector (and any exception nobody handles) enters
// kiln_fault_entry, which prints the fault status registers and the stacked
// frame over the UART in a fixed format that the host runner parses and
// explains, then exits with kiln::kFaultExitStatus. Format (one line each):
//   [kiln] FAULT exception=<n>
//   [kiln] CFSR=<hex> HFSR=<hex> MMFAR=<hex> BFAR=<hex> SFSR=<hex> SFAR=<hex>
//   [kiln] PC=<hex> LR=<hex> XPSR=<hex> SP=<hex> EXC_RETURN=<hex>
//   [kiln] R0=<hex> R1=<hex> R2=<hex> R3=<hex> R12=<hex>
// After a stack overflow (CFSR.STKOF) the frame was not stacked; the frame
// line then reads the words at the limit, which the runner says are invalid.
#include <cstdint>

#include "armv8m.h"
#include "kiln/platform.h"

namespace {

// The hardware-stacked exception frame (Armv8-M basic frame, first 8 words).
struct ExceptionFrame {
  uint32_t r0, r1, r2, r3, r12, lr, pc, xpsr;
};

// The print format takes unsigned int; uint32_t is unsigned long here.
unsigned u(uint32_t value) { return value; }

uint32_t ipsr() {
  uint32_t value;
  __asm volatile("mrs %0, ipsr" : "=r"(value));
  return value & 0x1FF;
}

}  // namespace

extern "C" __attribute__((noreturn, used)) void kiln_fault_report(const ExceptionFrame* frame, uint32_t exc_return) {
  using namespace kiln::armv8m;
  kiln::print("\n[kiln] FAULT exception=%u\n", u(ipsr()));
  kiln::print("[kiln] CFSR=%08x HFSR=%08x MMFAR=%08x BFAR=%08x SFSR=%08x SFAR=%08x\n", u(reg(kCfsr)), u(reg(kHfsr)),
              u(reg(kMmfar)), u(reg(kBfar)), u(kArmv8mMain ? reg(kSfsr) : 0), u(kArmv8mMain ? reg(kSfar) : 0));
  kiln::print("[kiln] PC=%08x LR=%08x XPSR=%08x SP=%08x EXC_RETURN=%08x\n", u(frame->pc), u(frame->lr), u(frame->xpsr),
              u(reinterpret_cast<uint32_t>(frame)), u(exc_return));
  kiln::print("[kiln] R0=%08x R1=%08x R2=%08x R3=%08x R12=%08x\n", u(frame->r0), u(frame->r1), u(frame->r2),
              u(frame->r3), u(frame->r12));
  kiln::exit(kiln::kFaultExitStatus);
}

// Picks the stack the frame went to (EXC_RETURN bit 2: 0 = MSP, 1 = PSP),
// lifts the stack limit so the reporter can use the reserve below it, and
// passes the frame and EXC_RETURN on.
extern "C" __attribute__((naked, noreturn)) void kiln_fault_entry() {
  __asm volatile(KILN_CLEAR_MSPLIM
                 "tst lr, #4           \n"
                 "ite eq               \n"
                 "mrseq r0, msp        \n"
                 "mrsne r0, psp        \n"
                 "mov r1, lr           \n"
                 "b kiln_fault_report  \n");
}
