// kiln in an application's own firmware: the public API (docs/embedding.md).
//
//   auto program = kiln::Program::load(pte, pte_size);            // verifies the .pte in place
//   auto needs = kiln::method_needs(program.value(), 0);           // what method 0 needs
//   static kiln::MethodBuffers buffers;                            // static: Methods point into it
//   KILN_CHECK(kiln::carve(needs.value(), arena, {}, buffers));    // the caller's arena, cut up
//   static kiln::Npu npu;
//   KILN_CHECK(npu.start(kNpuBase, buffers));                      // the Ethos-U, its backend
//   auto method = kiln::Method::create(program.value(), 0, buffers.memory, kiln::kKernelTable,
//                                      npu.backends());
//   memcpy(method.value().input(0)->data, input, method.value().input(0)->nbytes);
//   KILN_CHECK(method.value().execute());
//   const kiln::Tensor* out = method.value().output(0);           // read out->data
//
// Everything is kiln::runtime's (kiln/runtime/program.h and method.h state each contract:
// ownership, alignment, bounds, errors); this header names those types in namespace kiln and
// adds what an application needs that kiln's own runner takes from its build instead: the
// sizes a method needs read from the program at run time (method_needs), its memory cut out of
// the caller's arenas (carve), and the Ethos-U driver and backend set up over that memory (Npu).
// No heap, no exceptions, no RTTI; every fallible call returns a Result or Status.
//
// What the application provides (the board is the application's; docs/embedding.md):
//  - the .pte's bytes, 16-byte aligned, unchanged while the Program and its Methods are used
//    (kiln_add_pte in the CMake package bakes one into the image);
//  - the arenas: one for the planned buffers, tables and NPU scratch, in memory the NPU can
//    reach, and on Dedicated_Sram one in the NPU's fast memory (carve aligns every piece to
//    whole D-cache lines);
//  - the NPU's base address (to Npu::start) and, at the package's build, its interrupt number
//    (KILN_NPU_IRQ) with kiln_npu_irq_handler in the vector table at that interrupt;
//  - a console sink for kiln's error lines: on a kiln board kiln's UART (kiln::board), else
//    kiln_console_put below;
//  - the CPU's clock (KILN_CPU_CLOCK_HZ: the driver's millisecond timeout) and whether it has a
//    D-cache (KILN_CPU_HAS_DCACHE).
// The kernel table (kiln::kKernelTable) comes from the package's kiln_kernel_table() for the
// program's operators.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/delegates/ethosu_backend.h"
#include "kiln/ethosu/driver.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/kernel.h"
#include "kiln/runtime/method.h"
#include "kiln/runtime/program.h"
#include "kiln/runtime/result.h"
#include "kiln/runtime/span.h"
#include "kiln/runtime/try.h"
#include "kiln/runtime/types.h"

// The console sink on the application's own board (a package built with KILN_BOARD empty): the
// application defines it; kiln calls it for every character it prints (kiln::print, error lines),
// '\r' before each '\n', and it returns once the character is accepted.
extern "C" void kiln_console_put(char c);

namespace kiln {

using runtime::Backend;
using runtime::BackendTable;
using runtime::Error;
using runtime::ErrorCode;
using runtime::KernelTable;
using runtime::kKernelTable;
using runtime::Method;
using runtime::MethodMemory;
using runtime::print_error;
using runtime::Program;
using runtime::Result;
using runtime::ScalarType;
using runtime::Span;
using runtime::Status;
using runtime::StringView;
using runtime::Tensor;

// The most planned buffers (memory ids 1..n) carve handles; kiln's programs plan one (the
// activations) or two (and the state arena).
constexpr size_t kMaxPlannedBuffers = 4;
// Alignment of every buffer carve cuts: a D-cache line (the NPU writes the scratch), which also
// meets the planned buffers' 16 bytes.
constexpr size_t kBufferAlignment = 32;

// What one method needs from the caller, read from the program (bytes, or table entries).
struct MethodNeeds {
  size_t planned_count = 0;                   // memory ids 1..planned_count
  uint64_t planned[kMaxPlannedBuffers] = {};  // bytes of memory id k + 1
  size_t values = 0;                          // runtime::Value entries (program.value_count())
  size_t kernels = 0;                         // runtime::KernelFn entries (one per operator)
  size_t delegates = 0;                       // delegate slots, and Ethos-U pool entries
  uint32_t npu_scratch = 0;       // Ethos-U region 1: the largest delegate's, whole D-cache lines
  uint32_t npu_fast_scratch = 0;  // Ethos-U region 2 (Dedicated_Sram only), whole lines; else 0

  // The bytes carve takes from its arena for all of the above except the fast scratch,
  // alignment padding included (an arena 32-byte aligned needs no more); SIZE_MAX when that
  // does not fit a size_t or planned_count is above kMaxPlannedBuffers.
  size_t arena_bytes() const;
};

// The needs of method `index` of `program`. Errors: kMethodNotFound (Program::method),
// kTooLarge (a = the program's planned buffer count, b = kMaxPlannedBuffers), and
// kDelegateBadPayload from an Ethos-U delegate's payload (parse_payload).
Result<MethodNeeds> method_needs(const Program& program, size_t index);

// A method's memory, cut out of the caller's arenas: the planned buffers, the tables
// (values, kernels, delegate slots), the Ethos-U scratch, fast scratch and delegate pool.
// `memory` points at `planned` (and into the arenas): keep a MethodBuffers where it was carved
// (static storage) while any Method made from it is used; the arenas likewise.
struct MethodBuffers {
  Span<uint8_t> planned[kMaxPlannedBuffers];
  MethodMemory memory;
  Span<uint8_t> npu_scratch;
  Span<uint8_t> npu_fast_scratch;  // empty unless needs.npu_fast_scratch
  Span<delegates::ethosu::DelegateState> npu_pool;
};

// Fills `out` from `arena` (in order: planned buffers, NPU scratch, values, kernels, delegate
// slots, pool; each kBufferAlignment-aligned) and the fast scratch from `fast_arena`. The
// planned buffers are zeroed (a program's state arena starts at zero: program.h). Errors:
// kTooLarge (a = the bytes needed, b = the arena's (or fast arena's) size; or a = planned_count,
// b = kMaxPlannedBuffers); `out` is unchanged on an error.
Status carve(const MethodNeeds& needs, Span<uint8_t> arena, Span<uint8_t> fast_arena, MethodBuffers& out);

// The Ethos-U: kiln's driver and its EthosUBackend over a MethodBuffers' scratch, fast
// scratch and pool. Static storage: the backend record points into it; the MethodBuffers
// must outlive it. Constant-initialised (like MethodBuffers): a static one runs no constructor.
struct Npu {
  ethosu::Driver driver;
  delegates::ethosu::Context context;
  Backend backend{};
  const Backend* list[1] = {};

  // Finds the NPU at `base` (Driver::create: kNpuNotFound when none answers there) and sets
  // up the backend with the driver's run options (`options`: its timeout in milliseconds).
  Status start(uintptr_t base, const MethodBuffers& buffers, ethosu::RunOptions options = {});
  // The backends Method::create takes: the Ethos-U backend once started, else none.
  BackendTable backends() const { return BackendTable{list, list[0] != nullptr ? 1u : 0u}; }
};

}  // namespace kiln
