// The EthosUBackend delegate (see ethosu_backend.h).
#include "kiln/delegates/ethosu_backend.h"

#include <cstring>

#include "kiln/cpu.h"
#include "kiln/platform.h"
#include "kiln/runtime/try.h"

namespace kiln::delegates::ethosu {
namespace {

using kiln::cpu::Cache;
using kiln::cpu::maintain_dcache;
using runtime::DelegateArgs;
using runtime::DelegateFault;
using runtime::Error;
using runtime::ErrorCode;
using runtime::Result;
using runtime::Status;
using runtime::Tensor;

// Prints the one line every failure gets ("EthosUBackend: delegate <i>: <error>"): init
// and execute pass each failure of their checks (init_checked, run) through it.
template <typename T>
T reported(uint32_t delegate, T result) {
  if (!result.ok()) {
    kiln::print("EthosUBackend: delegate %u: ", unsigned(delegate));
    runtime::print_error(result.error());
  }
  return result;
}

Error init_failed(DelegateFault fault, uint32_t value) {
  return Error{ErrorCode::kDelegateInitFailed, static_cast<uint32_t>(fault), value};
}

Error bad_argument(DelegateFault fault, size_t value) {
  return Error{ErrorCode::kDelegateBadArgument, static_cast<uint32_t>(fault), static_cast<uint32_t>(value)};
}

// The regions every run of `p` gets: BASEP0 = the weights (read-only), BASEP1 = the
// scratch, BASEP2 = the fast scratch (only when given). One list for init's bounds check
// and execute's run, so the check proves the buffers the NPU is given.
int region_count(const Context& context) { return context.fast_scratch.empty() ? 2 : 3; }

void region_limits(const Context& context, const Payload& p, kiln::ethosu::RegionLimit (&limits)[3]) {
  limits[kWeightsRegion] = {p.weights_size, false};
  limits[kScratchRegion] = {p.scratch_size, true};
  limits[kFastScratchRegion] = {static_cast<uint32_t>(context.fast_scratch.size), true};
}

bool whole_lines(runtime::Span<uint8_t> buffer) {
  return (reinterpret_cast<uintptr_t>(buffer.data) | buffer.size) % kiln::cpu::kDcacheLine == 0;
}

Result<void*> init_checked(Context& context, const runtime::BackendInitArgs& args) {
  if (context.used >= context.pool.size) {
    return init_failed(DelegateFault::kPoolFull, static_cast<uint32_t>(context.pool.size));
  }
  KILN_TRY(const Payload payload, parse_payload(args.payload.data, args.payload.size));
  if (payload.scratch_size > context.scratch.size) {
    return init_failed(DelegateFault::kScratchTooSmall, payload.scratch_size);
  }
  const uint32_t fast = fast_scratch_needed(args.compile_specs);
  if (fast > context.fast_scratch.size) return init_failed(DelegateFault::kFastScratchTooSmall, fast);
  KILN_TRY(const kiln::ethosu::CommandStream stream, context.driver->check(payload.cmd, payload.cmd_size));
  // Once per delegate: every access of the stream lies inside the buffers execute() gives.
  kiln::ethosu::RegionLimit limits[3];
  region_limits(context, payload, limits);
  KILN_CHECK(context.driver->check_bounds(stream, limits, region_count(context)));
  if (!whole_lines(context.scratch) || !whole_lines(context.fast_scratch)) {
    return init_failed(DelegateFault::kScratchMisaligned, kiln::cpu::kDcacheLine);
  }
  // Cache maintenance done once (kiln/cpu.h states the rules): the command stream and
  // weights are constants of the .pte that only the NPU reads and nothing writes after
  // start-up, so one clean serves every run; the scratch and fast scratch are cleaned
  // and invalidated whole, so no dirty line left by earlier CPU writes (e.g. zeroing
  // .bss) is ever written back over the NPU's data. From here on the CPU writes in them
  // only the input bytes execute() cleans.
  maintain_dcache(Cache::kClean, stream.words, stream.size_bytes);
  maintain_dcache(Cache::kClean, payload.weights, payload.weights_size);
  maintain_dcache(Cache::kCleanInvalidate, context.scratch.data, context.scratch.size);
  maintain_dcache(Cache::kCleanInvalidate, context.fast_scratch.data, context.fast_scratch.size);
  DelegateState& state = context.pool[context.used++];
  state.payload = payload;
  state.stream = stream;
  state.index = args.delegate_index;
  return static_cast<void*>(&state);
}

Result<void*> init(void* raw, const runtime::BackendInitArgs& args) {
  return reported(args.delegate_index, init_checked(*static_cast<Context*>(raw), args));
}

// Argument `arg` against the payload's tensor `io`: its byte size must match, and a
// tensor the NPU writes (`written`) must not be one of the program's constants.
Status check_tensor(const Tensor& t, size_t arg, const IoTensor& io, bool written) {
  if (written && t.constant) return bad_argument(DelegateFault::kConstantOutput, arg);
  if (t.nbytes != io.bytes || t.data == nullptr) return bad_argument(DelegateFault::kArgumentSize, arg);
  return Status();
}

Status run(Context& context, const DelegateState& state, const DelegateArgs& args) {
  const Payload& p = state.payload;
  const size_t inputs = p.input_count;
  if (args.size() != inputs + p.output_count) return bad_argument(DelegateFault::kArgumentCount, args.size());
  // Per run, the cache maintenance covers only what the CPU touches: each input's bytes
  // in the scratch, written by the copy below or by the app in place (input_place), are
  // cleaned before the run; each output's bytes are invalidated after it, before the
  // copy reads them. The rest of the scratch is the NPU's alone (see init). Each input
  // is checked as it is copied (one decode of its record), every output before the run;
  // a refused argument may leave earlier inputs copied into the scratch, which is
  // harmless: every run copies them again.
  for (uint32_t i = 0; i < p.input_count; ++i) {
    const IoTensor io = p.input(i);
    const Tensor& t = args[i];
    KILN_CHECK(check_tensor(t, i, io, false));
    uint8_t* place = context.scratch.data + io.offset;
    if (t.data != place) std::memcpy(place, t.data, io.bytes);
    maintain_dcache(Cache::kClean, place, io.bytes);
  }
  for (uint32_t o = 0; o < p.output_count; ++o) {
    KILN_CHECK(check_tensor(args[inputs + o], inputs + o, p.output(o), true));
  }
  const kiln::ethosu::Region regions[] = {
      {p.weights, p.weights_size},
      {context.scratch.data, p.scratch_size},
      {context.fast_scratch.data, context.fast_scratch.size},
  };
  KILN_TRY(const uint64_t cycles, context.driver->run(state.stream, regions, region_count(context), context.options));
  context.npu_cycles += cycles;
  context.runs += 1;
  context.pmu.add(context.driver->pmu_counts());
  for (uint32_t o = 0; o < p.output_count; ++o) {
    const IoTensor io = p.output(o);
    const uint8_t* place = context.scratch.data + io.offset;
    maintain_dcache(Cache::kInvalidate, place, io.bytes);
    std::memcpy(args[inputs + o].data, place, io.bytes);
  }
  return Status();
}

Status execute(void* raw, void* handle, const DelegateArgs& args) {
  const DelegateState& state = *static_cast<const DelegateState*>(handle);
  return reported(state.index, run(*static_cast<Context*>(raw), state, args));
}

// Input `arg` of the delegate is read from its offset in the scratch.
void* input_place(void* raw, void* handle, size_t arg, size_t nbytes) {
  const Payload& p = static_cast<const DelegateState*>(handle)->payload;
  if (arg >= p.input_count) return nullptr;
  const IoTensor io = p.input(static_cast<uint32_t>(arg));
  if (nbytes != io.bytes) return nullptr;
  return static_cast<Context*>(raw)->scratch.data + io.offset;
}

}  // namespace

runtime::Backend backend(Context& context) {
  return runtime::Backend{kBackendId, &context, init, execute, input_place};
}

void reset_counters(Context& context) {
  context.npu_cycles = 0;
  context.runs = 0;
  context.pmu = kiln::ethosu::PmuCounts();
}

}  // namespace kiln::delegates::ethosu
