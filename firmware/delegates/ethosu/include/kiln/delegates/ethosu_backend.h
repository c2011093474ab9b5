// The "EthosUBackend" delegate for kiln's runtime: runs each delegate's Vela
// command stream on the Ethos-U55, U65 or U85 through kiln::ethosu::Driver (the family is the
// NPU's; a payload compiled for another family or MAC count fails init with kNpuTargetMismatch).
//
//   static kiln::delegates::ethosu::DelegateState pool[KILN_MODEL_DELEGATES];
//   static kiln::delegates::ethosu::Context npu{&driver, scratch, fast_scratch, pool};
//   const kiln::runtime::Backend ethosu = kiln::delegates::ethosu::backend(npu);
//
// init (once per delegate): checks every block of the payload, has the driver check
// the COP1 payload against this NPU (a stream for another configuration fails with
// the driver's kNpu*Mismatch code), proves that every memory access of the stream
// stays inside the buffers execute gives it (kiln::ethosu::check_stream_bounds: the
// weights read-only, the payload's scratch_size bytes of the scratch, the fast scratch;
// else kNpuAccess* or kNpuStreamUnprovable), and checks that the scratch (region 1) and fast
// scratch (region 2) given here are large enough (the fast scratch against the
// delegate's "kiln.fast_scratch_size" compile spec; a .pte without it, e.g. from
// ExecuTorch, is trusted to the given size), that both start and end on D-cache
// lines, and does the one-time cache maintenance (backend.cpp). execute (per
// DelegateCall): copies each input tensor into the scratch at the payload's input
// offset (nothing when the Method bound the input there: input_place), runs the
// stream with BASEP0 = the weights inside the payload, BASEP1 = the scratch, BASEP2 =
// the fast scratch (only when given: Dedicated_Sram), and copies the outputs back.
//
// Cache contract with the app (the D-cache rules are kiln/cpu.h's): the .pte's bytes
// are not written after Method::create; after Method::create the app writes nothing in
// the scratch or fast scratch except the bytes of Method inputs bound there (the
// delegate cleans those before each run), and reads nothing there.
//
// Memory modes are the app's placement of these buffers: Shared_Sram (weights in the
// model memory, scratch in SRAM), Sram_Only (the .pte and the scratch in SRAM),
// Dedicated_Sram (weights and scratch in DDR, fast scratch in the NPU's SRAM).
//
// Errors (kiln/runtime/error.h): init: kDelegateInitFailed (a = DelegateFault, b =
// the pool's size, the bytes of scratch or fast scratch the delegate needs, or the
// D-cache line), kDelegateBadPayload from parse_payload, the driver's kCop1* / kNpu*
// codes from Driver::check and Driver::check_bounds; execute: kDelegateBadArgument (a = DelegateFault, b = the
// argument's position, or the argument count), the driver's kNpu* codes from the run.
// Each failure also prints one line: "EthosUBackend: delegate <i>: <the error>".
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/delegates/ethosu_payload.h"
#include "kiln/ethosu/driver.h"
#include "kiln/runtime/backend.h"
#include "kiln/runtime/span.h"

namespace kiln::delegates::ethosu {

constexpr const char* kBackendId = "EthosUBackend";

// One initialised delegate: its checked payload and command stream (both borrow the
// .pte bytes).
struct DelegateState {
  Payload payload;
  kiln::ethosu::CommandStream stream;
  uint32_t index = 0;
};

// The backend's static state; the app owns it (static storage) and every buffer it
// points to. scratch and fast_scratch: address and size multiples of
// kiln::cpu::kDcacheLine (whole D-cache lines: the NPU writes them), shared by all
// delegates (they run one at a time), sized by the build from the payloads.
struct Context {
  const kiln::ethosu::Driver* driver = nullptr;
  runtime::Span<uint8_t> scratch;
  runtime::Span<uint8_t> fast_scratch;  // empty unless the memory mode has one
  runtime::Span<DelegateState> pool;    // one per delegate in the program
  uint32_t used = 0;                    // pool entries handed out
  kiln::ethosu::RunOptions options;
  uint64_t npu_cycles = 0;  // PMU cycles summed over every run since the last reset
  uint32_t runs = 0;        // command streams run since the last reset
  kiln::ethosu::PmuCounts pmu;  // the driver's PMU counts summed over the same runs
};

// The backend record for the runtime's BackendTable; `context` must outlive it.
runtime::Backend backend(Context& context);

// Clears the cycle, run and PMU counters (e.g. before each inference).
void reset_counters(Context& context);

// The bytes of fast scratch (region 2) a delegate needs: its "kiln.fast_scratch_size" compile
// spec (decimal bytes), or 0 when the .pte has none (e.g. written by ExecuTorch) or it is not a
// plain decimal number.
inline uint32_t fast_scratch_needed(const runtime::CompileSpecs& specs) {
  const runtime::Span<const uint8_t> text = specs.find("kiln.fast_scratch_size");
  uint64_t value = 0;
  for (size_t i = 0; i < text.size; ++i) {
    if (text.data[i] < '0' || text.data[i] > '9' || value > 0xFFFFFFFFu / 10) return 0;
    value = value * 10 + (text.data[i] - '0');
  }
  return value > 0xFFFFFFFFu ? 0 : static_cast<uint32_t>(value);
}

}  // namespace kiln::delegates::ethosu
