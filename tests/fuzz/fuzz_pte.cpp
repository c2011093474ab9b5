// libFuzzer target: a whole .pte as the firmware's apps take it.
// Program::load; as the generate app binds and runs methods: Method::create of every method with
// a handle (Program::method: not a constant method), with one set of planned memory sized from
// the program for all of them (the state arena shared), every CPU kernel (kiln_kernel_table ALL)
// and the real EthosUBackend (payload parser, Driver::check; the NPU the stand-in of
// host_npu.h); then each method in turn: its inputs filled from the fuzz input's bytes,
// execute() under the executor runner's work budget, every output's bytes read, as the runner
// reads them.
// With KILN_FUZZ_STATS set, the process prints at exit how many inputs got how far:
//   kiln fuzz_pte: inputs N loaded L created C executed E
// (C: inputs whose every method bound; E: whose every method ran)
// Bounded: an input whose planned memory, scratch and inputs need more than kMaxBytes
// together is dropped where the need shows (so no input makes the harness allocate
// without bound); the runtime's own work bounds are the runtime's (a slow input is a
// finding: libFuzzer's -timeout).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "fuzz_input.h"
#include "host_npu.h"
#include "kiln/cpu.h"
#include "kiln/delegates/ethosu_backend.h"
#include "kiln/runtime/method.h"

namespace {

using kiln::fuzz::Buffer;
using namespace kiln::runtime;
namespace ethosu = kiln::delegates::ethosu;

constexpr size_t kMaxBytes = size_t{16} << 20;

struct Stats {
  unsigned long inputs = 0, loaded = 0, created = 0, executed = 0;
};
Stats g_stats;

void print_stats() {
  std::fprintf(stderr, "kiln fuzz_pte: inputs %lu loaded %lu created %lu executed %lu\n", g_stats.inputs,
               g_stats.loaded, g_stats.created, g_stats.executed);
}

// Hands out at most kMaxBytes over one input.
class Budget {
 public:
  bool take(uint64_t bytes) {
    if (bytes > left_) return false;
    left_ -= bytes;
    return true;
  }

 private:
  uint64_t left_ = kMaxBytes;
};

bool is_ethosu(StringView id) {
  const size_t n = std::strlen(ethosu::kBackendId);
  return id.size == n && std::memcmp(id.data, ethosu::kBackendId, n) == 0;
}

// The scratch the program's Ethos-U delegates need (the largest scratch_size of a payload
// that parses, over every method), rounded up to whole D-cache lines as the backend requires.
uint64_t scratch_needed(const std::vector<Program>& plans) {
  uint64_t needed = 0;
  for (const Program& program : plans) {
    for (size_t i = 0; i < program.delegate_count(); ++i) {
      const DelegateInfo d = program.delegate(i);
      if (!is_ethosu(d.id)) continue;
      auto payload = ethosu::parse_payload(d.payload.data, d.payload.size);
      if (payload.ok() && payload.value().scratch_size > needed) needed = payload.value().scratch_size;
    }
  }
  const uint64_t line = kiln::cpu::kDcacheLine;
  return (needed + line - 1) / line * line;
}

// Reads every byte of every output, as the runner does when it prints them.
void read_outputs(const Method& method) {
  volatile uint8_t sum = 0;
  for (size_t o = 0; o < method.output_count(); ++o) {
    const Tensor* t = method.output(o);
    if (t == nullptr) continue;
    const auto* bytes = static_cast<const uint8_t*>(t->data);
    for (uint32_t k = 0; k < t->nbytes; ++k) sum = sum + bytes[k];
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::getenv("KILN_FUZZ_STATS") != nullptr) std::atexit(print_stats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ++g_stats.inputs;
  const Buffer pte(data, size);
  auto loaded = Program::load(pte.data(), pte.size());
  if (!loaded.ok()) return 0;
  ++g_stats.loaded;
  const Program& program = loaded.value();
  Budget budget;
  std::vector<Program> plans;  // every method with a handle (a constant method has none)
  size_t ids = 0, delegates = 0;
  for (size_t m = 0; m < program.method_count(); ++m) {
    const auto plan = program.method(m);
    if (!plan.ok()) continue;
    plans.push_back(plan.value());
    ids = std::max(ids, plans.back().planned_buffer_count());
    delegates += plans.back().delegate_count();
  }

  // One set of planned buffers for every method (each memory id the largest plan's, the state
  // arena zeroed once): a buffer the budget cannot give is left empty, for create to refuse.
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Span<uint8_t>> planned;
  for (uint32_t id = 1; id <= ids; ++id) {
    uint64_t want = 0;
    for (const Program& plan : plans) want = std::max(want, plan.planned_buffer_size(id));
    buffers.push_back(std::make_unique<Buffer>(budget.take(want) ? static_cast<size_t>(want) : 0));
    std::memset(buffers.back()->data(), 0, buffers.back()->size());
    planned.push_back(Span<uint8_t>{buffers.back()->data(), buffers.back()->size()});
  }
  const uint64_t scratch_size = scratch_needed(plans);
  const Buffer scratch(budget.take(scratch_size) ? static_cast<size_t>(scratch_size) : 0, kiln::cpu::kDcacheLine);
  std::vector<ethosu::DelegateState> pool(delegates);
  ethosu::Context context;  // no fast scratch (Shared_Sram)
  context.driver = &kiln::fuzz::npu();
  context.scratch = {scratch.data(), scratch.size()};
  context.pool = {pool.data(), pool.size()};
  const Backend npu = ethosu::backend(context);
  const Backend* const backend_list[] = {&npu};
  const BackendTable backends{backend_list, 1};

  // Every method bound first, then each run in turn (the state carried from one to the next).
  std::vector<std::vector<Value>> values(plans.size());
  std::vector<std::vector<KernelFn>> kernels(plans.size());
  std::vector<std::vector<DelegateSlot>> slots(plans.size());
  std::vector<Method> methods;
  for (size_t m = 0; m < plans.size(); ++m) {
    values[m].resize(plans[m].value_count());
    kernels[m].resize(plans[m].operator_count());
    slots[m].resize(plans[m].delegate_count());
    const MethodMemory memory{{planned.data(), planned.size()},
                              {values[m].data(), values[m].size()},
                              {kernels[m].data(), kernels[m].size()},
                              {slots[m].data(), slots[m].size()}};
    auto created = Method::create(plans[m], memory, kKernelTable, backends);
    if (!created.ok()) return 0;
    methods.push_back(created.value());
    methods.back().set_work_budget(runner_work_budget(methods.back().work_per_run()));  // the runner's watchdog
  }
  ++g_stats.created;

  std::vector<std::unique_ptr<Buffer>> inputs;
  for (size_t m = 0; m < methods.size(); ++m) {
    Method& method = methods[m];
    for (size_t i = 0; i < method.input_count(); ++i) {
      Tensor* t = method.input(i);
      if (t == nullptr) continue;
      if (t->data == nullptr) {
        if (!budget.take(t->nbytes)) return 0;
        inputs.push_back(std::make_unique<Buffer>(t->nbytes));
        if (!method.set_input(i, inputs.back()->data(), t->nbytes).ok()) return 0;
      }
      auto* bytes = static_cast<uint8_t*>(t->data);
      for (uint32_t k = 0; k < t->nbytes; ++k) bytes[k] = data[(k * 7 + i + m) % size];
    }
    if (!method.execute().ok()) return 0;
    read_outputs(method);
  }
  ++g_stats.executed;
  return 0;
}
