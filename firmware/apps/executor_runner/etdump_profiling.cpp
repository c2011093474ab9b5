// The executor runner's profiling hooks (profiling.h) that record an ETDump: one RunData
// ("Execute") per inference; per delegate call, one ProfileEvent per NPU layer and one for the
// call (DELEGATE_CALL), all with the call's program instruction (instruction_id) and chain 0, as
// ExecuTorch's runtime and delegates log them; a layer's event carries its label ("conv1
// aten.conv2d", etdump_layers.h) as delegate_debug_id_str, which ExecuTorch's Inspector shows as
// the event's name.
//
// Times are NPU cycles read from the NPU's PMU cycle counter (the delegate's Context.npu_cycles
// before and after each call): an inference's clock starts at 0 and advances by each call's
// stream; the CPU's time between streams is not on it. A DELEGATE_CALL event spans its stream's
// measured cycles. The NPU runs a stream as one job and its PMU is read at the end, so a layer's
// span is its share of the measured count, apportioned by the cycles kiln's NPU model accounts
// to each layer (etdump_layers.h): start = call start + measured * (cycles of the layers before)
// / (the stream's cycles), so the layers tile the call exactly.
//
// At the end (finish) the ETDump is written into a static buffer and printed base64-encoded
// between two lines (kiln.reference.etdump reads them):
//   ETDump: N bytes, R run(s), times in NPU cycles (base64 follows)
//   <base64, 76 characters a line>
//   ETDump end
// Storage is static and bounded (kMaxRuns, kMaxEvents, kBufferBytes): a run or event beyond it is
// not recorded, and an ETDump that does not fit is not printed; either prints a "runner: ETDump:"
// line saying so (the host refuses such a record).
#include <cstring>

#include "etdump_layers.h"
#include "etdump_writer.h"
#include "kiln/platform.h"
#include "npu_ethosu.h"
#include "profiling.h"

namespace kiln::runner::profiling {
namespace {

constexpr size_t kMaxRuns = 32;
constexpr size_t kMaxEvents = 128;
constexpr size_t kMaxDelegates = 32;
constexpr size_t kBufferBytes = 16 * 1024;  // about 110 bytes an event
constexpr const char* kRunName = "Execute";  // ExecuTorch's name of Method::execute's block
constexpr const char* kDelegateCall = "DELEGATE_CALL";

// Every member initialised by a constant: the recorder needs no static initialiser.
struct Recorder {
  runtime::Backend inner{};    // the NPU's backend (a copy of npu_backends()'s)
  runtime::Backend wrapper{};  // inner wrapped; its context is inner
  const runtime::Backend* list[1] = {};
  void* handles[kMaxDelegates] = {};  // init's handle per delegate index
  etdump::Run runs[kMaxRuns];
  size_t run_count = 0;
  etdump::ProfileEvent events[kMaxEvents];
  size_t event_count = 0;
  uint64_t clock = 0;  // NPU cycles of the current inference so far
  bool dropped = false;
};
Recorder recorder;

// a * part / whole for part <= whole < 2^32, without overflowing 64 bits.
uint64_t share(uint64_t a, uint32_t part, uint32_t whole) {
  if (whole == 0) return 0;
  return (a / whole) * part + (a % whole) * part / whole;
}

etdump::ProfileEvent* next_event() {
  if (recorder.run_count == 0 || recorder.event_count == kMaxEvents) {
    recorder.dropped = true;
    return nullptr;
  }
  ++recorder.runs[recorder.run_count - 1].event_count;
  etdump::ProfileEvent* event = &recorder.events[recorder.event_count++];
  *event = etdump::ProfileEvent{};
  return event;
}

void record(uint32_t delegate, uint64_t cycles) {
  const uint64_t start = recorder.clock;
  recorder.clock += cycles;
  using etdump_layers::kDelegates;
  const bool known = delegate < etdump_layers::kDelegateCount;
  const int32_t instruction = known ? kDelegates[delegate].instruction_id : -1;
  uint32_t before = 0;
  for (uint32_t k = 0; known && k < kDelegates[delegate].count; ++k) {
    const etdump_layers::Layer& layer = kDelegates[delegate].layers[k];
    etdump::ProfileEvent* event = next_event();
    if (event == nullptr) return;
    event->instruction_id = instruction;
    event->delegate_debug_id_str = layer.label;
    event->start_time = start + share(cycles, before, kDelegates[delegate].cycles);
    before += layer.cycles;
    event->end_time = start + share(cycles, before, kDelegates[delegate].cycles);
  }
  etdump::ProfileEvent* call = next_event();
  if (call == nullptr) return;
  call->name = kDelegateCall;
  call->instruction_id = instruction;
  call->start_time = start;
  call->end_time = start + cycles;
}

runtime::Result<void*> init(void* context, const runtime::BackendInitArgs& args) {
  const runtime::Backend& npu = *static_cast<const runtime::Backend*>(context);
  auto handle = npu.init(npu.context, args);
  if (handle.ok() && args.delegate_index < kMaxDelegates) recorder.handles[args.delegate_index] = handle.value();
  return handle;
}

runtime::Status execute(void* context, void* handle, const runtime::DelegateArgs& args) {
  const runtime::Backend& npu = *static_cast<const runtime::Backend*>(context);
  const uint64_t before = runner::npu().context.npu_cycles;
  runtime::Status status = npu.execute(npu.context, handle, args);
  if (!status.ok()) return status;
  uint32_t delegate = 0;
  while (delegate < kMaxDelegates && recorder.handles[delegate] != handle) ++delegate;
  record(delegate, runner::npu().context.npu_cycles - before);
  return status;
}

void* input_place(void* context, void* handle, size_t arg, size_t nbytes) {
  const runtime::Backend& npu = *static_cast<const runtime::Backend*>(context);
  return npu.input_place ? npu.input_place(npu.context, handle, arg, nbytes) : nullptr;
}

// `data` base64-encoded (RFC 4648, with padding), kLine characters a line.
void print_base64(const uint8_t* data, size_t length) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  constexpr size_t kLine = 76;  // a multiple of 4: whole groups per line
  char line[kLine + 1];
  size_t used = 0;
  for (size_t i = 0; i < length; i += 3) {
    const size_t n = length - i < 3 ? length - i : 3;
    const uint32_t group =
        uint32_t{data[i]} << 16 | (n > 1 ? uint32_t{data[i + 1]} << 8 : 0) | (n > 2 ? uint32_t{data[i + 2]} : 0);
    for (size_t k = 0; k < 4; ++k) line[used++] = k <= n ? kAlphabet[(group >> (18 - 6 * k)) & 63] : '=';
    if (used == kLine || i + 3 >= length) {
      line[used] = '\0';
      print("%s\n", line);
      used = 0;
    }
  }
}

}  // namespace

runtime::BackendTable backends(runtime::BackendTable npu) {
  recorder.inner = *npu.backends[0];
  recorder.wrapper = runtime::Backend{recorder.inner.id, &recorder.inner, init, execute, input_place};
  recorder.list[0] = &recorder.wrapper;
  return runtime::BackendTable{recorder.list, 1};
}

void begin_inference() {
  recorder.clock = 0;
  if (recorder.run_count == kMaxRuns) {
    recorder.dropped = true;
    return;
  }
  recorder.runs[recorder.run_count++] = etdump::Run{kRunName, &recorder.events[recorder.event_count], 0};
}

int finish(int status) {
  if (recorder.dropped) {
    print("runner: ETDump: more than %u inferences or %u events; the rest were not recorded\n", unsigned(kMaxRuns),
          unsigned(kMaxEvents));
  }
  alignas(8) static uint8_t buffer[kBufferBytes];
  auto written = etdump::write(recorder.runs, recorder.run_count, buffer, sizeof(buffer));
  if (!written.ok()) {
    print("runner: ETDump: not written: ");
    runtime::print_error(written.error());
    return status;
  }
  print("ETDump: %u bytes, %u run(s), times in NPU cycles (base64 follows)\n", unsigned(written.value()),
        unsigned(recorder.run_count));
  print_base64(buffer, written.value());
  print("ETDump end\n");
  return status;
}

}  // namespace kiln::runner::profiling
