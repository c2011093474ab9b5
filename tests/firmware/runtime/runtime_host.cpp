// Host driver for kiln's runtime core (tests only; uses the heap freely).
//   runtime_host load FILE              the program's summary as JSON, or the error
//   runtime_host run [--work-budget=N] FILE OUTDIR IN...
//                                       executes with raw input files; writes output_<i>.bin;
//                                       the work budget is N elements, by default what the
//                                       executor runner sets (kRunnerWorkMargin x work_per_run)
//   runtime_host sequence [--buffers=K] [--state-bytes=N] FILE OUTDIR CALL...
//                                       creates every method named by a CALL (METHOD=IN,IN...),
//                                       all over one set of planned buffers (each memory id the
//                                       largest plan's; the state arena zeroed once), and runs the
//                                       calls in order; writes call<k>_output_<i>.bin and
//                                       call<k>_state.bin (the arena after call k). --buffers=K
//                                       supplies only memory ids 1..K, --state-bytes=N an arena
//                                       of N bytes (the methods' own checks then refuse them)
//   runtime_host corrupt FILE [--execute] [--flip-limit N]
//                                       loads every truncation and every single-byte
//                                       flip of FILE; prints outcome counts as JSON
//   runtime_host result-from-ok         prints what a Result and a Status made from
//                                       Error{kOk} hold ("<ok> <code>" each)
//   runtime_host value-of-error         calls value() on a failed Result (it must trap)
//   runtime_host print-error CODE A B   prints Error{CODE, A, B} with print_error
//   runtime_host parse-payload FILE     the Ethos-U delegate's parse_payload of FILE (a
//                                       vela_bin_stream payload) as JSON, or the error
//   runtime_host parse-payload FILE --corrupt
//                                       parses every truncation and single-byte flip of
//                                       FILE; prints outcome counts as JSON (each parsed
//                                       one's tensors must lie inside its scratch)
// Errors print "error 0x<code> " and the error (kiln::runtime::print_error) and exit
// with status 1. Delegates bind to a stand-in "EthosUBackend" that checks its
// arguments and leaves outputs as they are (the real one runs on the NPU).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/delegates/ethosu_payload.h"
#include "kiln/runtime/method.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {

struct Aligned {
  uint8_t* data = nullptr;
  size_t size = 0;
  explicit Aligned(size_t n) : size(n) {
    // Exactly n bytes, so AddressSanitizer reports any read past the end.
    if (posix_memalign(reinterpret_cast<void**>(&data), 16, n ? n : 1) != 0) std::abort();
  }
  ~Aligned() { std::free(data); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
};

std::vector<uint8_t> read_file(const char* path) {
  std::vector<uint8_t> bytes;
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", path);
    std::exit(2);
  }
  uint8_t chunk[65536];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  std::fclose(f);
  return bytes;
}

int fail(const Error& e) {
  std::printf("error 0x%03x ", static_cast<unsigned>(e.code));
  print_error(e);
  return 1;
}

// A Result cannot be made from a bare code (an Error names its values).
static_assert(!std::is_constructible_v<Result<int>, ErrorCode>, "Result from a bare code");
static_assert(!std::is_convertible_v<ErrorCode, Status>, "Status from a bare code");

int cmd_result_from_ok() {
  const Result<int> value = Error{ErrorCode::kOk, 0, 0};
  const Status status = Error{ErrorCode::kOk, 0, 0};
  std::printf("%d %s\n%d %s\n", value.ok(), to_string(value.error().code), status.ok(), to_string(status.error().code));
  return 0;
}

int cmd_value_of_error() {
  const Result<int> failed = Error{ErrorCode::kTooLarge, 1, 2};
  std::printf("value %d\n", failed.value());  // must not be reached
  return 0;
}

uint32_t fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

std::string text(StringView s) { return std::string(s.data ? s.data : "", s.size); }

// The stand-in backend: counts calls and checks its handle and argument count.
struct StandIn {
  int inits = 0;
  int executes = 0;
  uint32_t handles[64];
};
StandIn g_standin;

Result<void*> standin_init(void* context, const BackendInitArgs& args) {
  auto* s = static_cast<StandIn*>(context);
  if (s->inits >= 64) {
    return Error{ErrorCode::kDelegateInitFailed, static_cast<uint32_t>(DelegateFault::kPoolFull), args.delegate_index};
  }
  s->handles[s->inits] = args.delegate_index;
  return static_cast<void*>(&s->handles[s->inits++]);
}

Status standin_execute(void* context, void* handle, const DelegateArgs& args) {
  auto* s = static_cast<StandIn*>(context);
  ++s->executes;
  if (handle == nullptr) return Error{ErrorCode::kInvalidArgument, 0, 0};
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].data == nullptr && args[i].nbytes != 0) {
      return Error{ErrorCode::kInvalidArgument, 1, static_cast<uint32_t>(i)};
    }
  }
  return {};
}

const Backend kStandIn{"EthosUBackend", &g_standin, standin_init, standin_execute};
const Backend* const kBackendList[] = {&kStandIn};
const BackendTable kBackends{kBackendList, 1};

// Planned buffers and method storage sized from the program (the firmware's build
// step does this statically): each memory id as the largest of `plans` declares it (the handle's
// own plan when none are given), given `limit` ids at most and memory id kStateMemoryId
// `state_bytes` bytes when not SIZE_MAX.
struct Memory {
  std::vector<Aligned*> buffers;
  std::vector<Span<uint8_t>> spans;
  std::vector<Value> values;
  std::vector<KernelFn> kernels;
  std::vector<DelegateSlot> delegates;
  MethodMemory method;

  explicit Memory(const Program& p, const std::vector<Program>& plans = {}, size_t limit = SIZE_MAX,
                  size_t state_bytes = SIZE_MAX)
      : values(p.value_count()), kernels(p.operator_count()), delegates(p.delegate_count()) {
    const std::vector<Program> sizing = plans.empty() ? std::vector<Program>{p} : plans;
    size_t ids = 0;
    for (const Program& plan : sizing) ids = std::max(ids, plan.planned_buffer_count());
    for (uint32_t id = 1; id <= std::min(ids, limit); ++id) {
      size_t size = 0;
      for (const Program& plan : sizing) size = std::max(size, static_cast<size_t>(plan.planned_buffer_size(id)));
      if (id == kStateMemoryId && state_bytes != SIZE_MAX) size = state_bytes;
      if (size > (256u << 20)) size = 0;  // a corrupted size: let create report it
      buffers.push_back(new Aligned(size));
      std::memset(buffers.back()->data, 0, size);
      spans.push_back(Span<uint8_t>{buffers.back()->data, size});
    }
    method = MethodMemory{{spans.data(), spans.size()},
                          {values.data(), values.size()},
                          {kernels.data(), kernels.size()},
                          {delegates.data(), delegates.size()}};
  }
  ~Memory() {
    for (Aligned* b : buffers) delete b;
  }
};

void print_tensor(const TensorInfo& t) {
  std::printf("{\"type\": %d, \"nbytes\": %zu, \"value\": %u, \"sizes\": [", static_cast<int>(t.type), t.nbytes,
              t.value_index);
  for (size_t d = 0; d < t.sizes.size; ++d) std::printf("%s%d", d ? ", " : "", t.sizes[d]);
  std::printf("]}");
}

// The methods' names, planned buffers and state tensors (JSON); a method without a handle
// (Program::method refuses it) as its error's name, a constant method's number as "constant".
void print_methods(const Program& p) {
  std::printf(",\n \"methods\": [");
  for (size_t i = 0; i < p.method_count(); ++i) {
    const StringView name = p.method_name(i);
    std::printf("%s{\"name\": \"%s\"", i ? ", " : "", text(name).c_str());
    const Result<int64_t> constant = p.constant_method(name);
    if (constant.ok()) std::printf(", \"constant\": %lld", static_cast<long long>(constant.value()));
    const Result<Program> m = p.method(i);
    if (!m.ok()) {
      std::printf(", \"refused\": \"%s\"}", to_string(m.error().code));
      continue;
    }
    const Program& plan = m.value();
    std::printf(", \"planned\": [");
    for (uint32_t id = 1; id <= plan.planned_buffer_count(); ++id) {
      std::printf("%s%llu", id > 1 ? ", " : "", static_cast<unsigned long long>(plan.planned_buffer_size(id)));
    }
    std::printf("], \"states\": [");
    for (size_t k = 0; k < plan.state_count(); ++k) {
      const StateTensor st = plan.state(k);
      std::printf("%s[\"%s\", %llu, ", k ? ", " : "", text(st.name).c_str(),
                  static_cast<unsigned long long>(st.offset));
      print_tensor(st.tensor);
      std::printf("]");
    }
    std::printf("]}");
  }
  std::printf("]");
}

// The .pte at `path` loaded from a copy of its bytes in `pte` (exactly its size: AddressSanitizer
// sees any read past it).
Result<Program> load_file(const char* path, std::unique_ptr<Aligned>& pte) {
  std::vector<uint8_t> file = read_file(path);
  pte = std::make_unique<Aligned>(file.size());
  std::memcpy(pte->data, file.data(), file.size());
  return Program::load(pte->data, pte->size);
}

int cmd_load(const char* path) {
  std::unique_ptr<Aligned> pte;
  Result<Program> loaded = load_file(path, pte);
  if (!loaded.ok()) return fail(loaded.error());
  const Program& p = loaded.value();
  std::printf("{\"values\": %u, \"instructions\": %zu,\n \"inputs\": [", p.value_count(), p.instruction_count());
  for (size_t i = 0; i < p.input_count(); ++i) {
    std::printf(i ? ", " : "");
    print_tensor(p.input(i));
  }
  std::printf("],\n \"outputs\": [");
  for (size_t i = 0; i < p.output_count(); ++i) {
    std::printf(i ? ", " : "");
    print_tensor(p.output(i));
  }
  std::printf("],\n \"planned\": [");
  for (uint32_t id = 1; id <= p.planned_buffer_count(); ++id) {
    std::printf("%s%llu", id > 1 ? ", " : "", static_cast<unsigned long long>(p.planned_buffer_size(id)));
  }
  std::printf("],\n \"operators\": [");
  for (size_t i = 0; i < p.operator_count(); ++i) {
    OperatorInfo op = p.op(i);
    std::printf("%s[\"%s\", \"%s\"]", i ? ", " : "", text(op.name).c_str(), text(op.overload).c_str());
  }
  std::printf("],\n \"delegates\": [");
  for (size_t i = 0; i < p.delegate_count(); ++i) {
    DelegateInfo d = p.delegate(i);
    std::printf("%s{\"id\": \"%s\", \"payload_size\": %zu, \"payload_fnv\": %u, \"specs\": [", i ? ", " : "",
                text(d.id).c_str(), d.payload.size, fnv1a(d.payload.data, d.payload.size));
    for (size_t j = 0; j < d.compile_specs.size(); ++j) {
      CompileSpec s = d.compile_specs[j];
      std::printf("%s[\"%s\", %zu, %u]", j ? ", " : "", text(s.key).c_str(), s.value.size,
                  fnv1a(s.value.data, s.value.size));
    }
    std::printf("]}");
  }
  std::printf("],\n \"named\": [");
  for (size_t i = 0; i < p.named_data_count(); ++i) {
    NamedData n = p.named_data(i);
    Span<const uint8_t> found = p.find_named_data(n.key);
    std::printf("%s[\"%s\", %zu, %u, %d]", i ? ", " : "", text(n.key).c_str(), n.data.size,
                fnv1a(n.data.data, n.data.size), found.data == n.data.data);
  }
  std::printf("]");
  print_methods(p);
  std::printf("}\n");
  return 0;
}

// Fills a method's inputs from `files`, one per input; `keep` holds the bytes of those bound
// with set_input. 0, or the exit status after printing why.
int set_inputs(Method& m, const std::vector<std::string>& files, std::vector<std::vector<uint8_t>>& keep) {
  if (files.size() != m.input_count()) {
    std::fprintf(stderr, "the program takes %zu inputs\n", m.input_count());
    return 2;
  }
  keep.reserve(files.size());  // set_input keeps pointers into it
  for (size_t i = 0; i < files.size(); ++i) {
    keep.push_back(read_file(files[i].c_str()));
    Tensor* t = m.input(i);
    if (keep.back().size() != t->nbytes) return fail(Error{ErrorCode::kMethodBadInput, static_cast<uint32_t>(i), 0});
    if (t->data == nullptr) {
      Status s = m.set_input(i, keep.back().data(), keep.back().size());
      if (!s.ok()) return fail(s.error());
    } else if (t->nbytes != 0) {  // an empty input's vector has no data
      std::memcpy(t->data, keep.back().data(), t->nbytes);
    }
  }
  return 0;
}

void write_file(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::exit(2);
  if (n) std::fwrite(data, 1, n, f);
  std::fclose(f);
}

int cmd_sequence(const char* path, const char* out_dir, char** calls, int n_calls, size_t limit, size_t state_bytes) {
  std::unique_ptr<Aligned> pte;
  Result<Program> loaded = load_file(path, pte);
  if (!loaded.ok()) return fail(loaded.error());
  const Program& program = loaded.value();
  std::vector<Program> plans(program.method_count()), sizing;  // a method without a handle: Program()
  for (size_t i = 0; i < plans.size(); ++i) {
    const Result<Program> plan = program.method(i);
    if (plan.ok()) sizing.push_back(plans[i] = plan.value());
  }
  // One set of planned buffers for every method; each method its own value, kernel and
  // delegate storage.
  Memory shared(program, sizing, limit, state_bytes);
  std::map<std::string, std::unique_ptr<Memory>> storage;
  std::map<std::string, Method> methods;
  for (int k = 0; k < n_calls; ++k) {
    const std::string call = calls[k];
    const std::string name = call.substr(0, call.find('='));
    if (methods.count(name)) continue;
    const Result<size_t> index = program.method_index(StringView(name.data(), name.size()));
    if (!index.ok()) return fail(index.error());
    auto memory = std::make_unique<Memory>(plans[index.value()], std::vector<Program>{}, 0);
    memory->method.planned = shared.method.planned;
    Result<Method> created =
        Method::create(program, StringView(name.data(), name.size()), memory->method, kKernelTable, kBackends);
    if (!created.ok()) return fail(created.error());
    storage[name] = std::move(memory);
    methods[name] = created.value();
  }
  for (int k = 0; k < n_calls; ++k) {
    const std::string call = calls[k];
    const size_t eq = call.find('=');
    Method& m = methods[call.substr(0, eq)];
    m.set_work_budget(runner_work_budget(m.work_per_run()));
    std::vector<std::string> files;  // the comma-separated list after '='
    for (size_t start = eq + 1; eq != std::string::npos && start <= call.size();) {
      const size_t end = std::min(call.find(',', start), call.size());
      files.push_back(call.substr(start, end - start));
      start = end + 1;
    }
    std::vector<std::vector<uint8_t>> keep;
    if (int status = set_inputs(m, files, keep)) return status;
    Status run = m.execute();
    if (!run.ok()) return fail(run.error());
    const std::string prefix = std::string(out_dir) + "/call" + std::to_string(k);
    for (size_t i = 0; i < m.output_count(); ++i) {
      write_file(prefix + "_output_" + std::to_string(i) + ".bin", m.output(i)->data, m.output(i)->nbytes);
    }
    if (shared.method.planned.size >= kStateMemoryId) {
      const Span<uint8_t>& arena = shared.method.planned[kStateMemoryId - 1];
      write_file(prefix + "_state.bin", arena.data, arena.size);
    }
  }
  std::printf("ok methods=%zu calls=%d\n", methods.size(), n_calls);
  return 0;
}

int cmd_run(const char* path, const char* out_dir, char** inputs, int n_inputs, const char* budget) {
  std::unique_ptr<Aligned> pte;
  Result<Program> loaded = load_file(path, pte);
  if (!loaded.ok()) return fail(loaded.error());
  Memory memory(loaded.value());
  Result<Method> created = Method::create(loaded.value(), memory.method, kKernelTable, kBackends);
  if (!created.ok()) return fail(created.error());
  Method& m = created.value();
  m.set_work_budget(budget != nullptr ? std::strtoull(budget, nullptr, 10) : runner_work_budget(m.work_per_run()));
  std::vector<std::vector<uint8_t>> input_data;
  if (int status = set_inputs(m, std::vector<std::string>(inputs, inputs + n_inputs), input_data)) return status;
  Status run = m.execute();
  if (!run.ok()) return fail(run.error());
  for (size_t i = 0; i < m.output_count(); ++i) {
    write_file(std::string(out_dir) + "/output_" + std::to_string(i) + ".bin", m.output(i)->data, m.output(i)->nbytes);
  }
  std::printf("ok delegate_inits=%d delegate_executes=%d work_per_run=%llu\n", g_standin.inits, g_standin.executes,
              static_cast<unsigned long long>(m.work_per_run()));
  return 0;
}

// One corrupted image: load it, and with `execute` also bind and run it.
void try_image(const uint8_t* bytes, size_t size, bool execute, std::map<std::string, int>& outcomes) {
  Aligned pte(size);
  if (size) std::memcpy(pte.data, bytes, size);
  Result<Program> loaded = Program::load(pte.data, size);
  if (!loaded.ok()) {
    ++outcomes[to_string(loaded.error().code)];
    return;
  }
  if (!execute) {
    ++outcomes["loaded"];
    return;
  }
  Memory memory(loaded.value());
  g_standin.inits = 0;
  Result<Method> created = Method::create(loaded.value(), memory.method, kKernelTable, kBackends);
  if (!created.ok()) {
    ++outcomes[std::string("create: ") + to_string(created.error().code)];
    return;
  }
  Status run = created.value().execute();
  ++outcomes[run.ok() ? "executed" : std::string("execute: ") + to_string(run.error().code)];
}

int cmd_corrupt(const char* path, bool execute, size_t flip_limit) {
  std::vector<uint8_t> file = read_file(path);
  std::map<std::string, int> truncations, flips;
  for (size_t n = 0; n < file.size(); ++n) try_image(file.data(), n, false, truncations);
  std::vector<uint8_t> copy = file;
  size_t limit = flip_limit < file.size() ? flip_limit : file.size();
  for (size_t i = 0; i < limit; ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      copy[i] ^= mask;
      try_image(copy.data(), copy.size(), execute, flips);
      copy[i] ^= mask;
    }
  }
  auto print = [](const char* name, const std::map<std::string, int>& m) {
    std::printf("\"%s\": {", name);
    bool first = true;
    for (const auto& [k, v] : m) {
      std::printf("%s\"%s\": %d", first ? "" : ", ", k.c_str(), v);
      first = false;
    }
    std::printf("}");
  };
  std::printf("{");
  print("truncations", truncations);
  std::printf(", ");
  print("flips", flips);
  std::printf("}\n");
  return 0;
}

// --- The Ethos-U delegate's payload parser ----------------------------------------

namespace ethosu = kiln::delegates::ethosu;

void print_ios(const char* name, const ethosu::Payload& p, bool outputs) {
  std::printf("\"%s\": [", name);
  const uint32_t count = outputs ? p.output_count : p.input_count;
  for (uint32_t i = 0; i < count; ++i) {
    const ethosu::IoTensor io = outputs ? p.output(i) : p.input(i);
    std::printf("%s[%u, %u, %u]", i ? ", " : "", io.offset, io.bytes, io.elem_size);
  }
  std::printf("]");
}

// Every tensor of a parsed payload lies inside its scratch (what parse_payload promises).
bool inside_scratch(const ethosu::Payload& p) {
  for (uint32_t i = 0; i < p.input_count + p.output_count; ++i) {
    const ethosu::IoTensor io = i < p.input_count ? p.input(i) : p.output(i - p.input_count);
    if (uint64_t{io.offset} + io.bytes > p.scratch_size) return false;
  }
  return true;
}

int cmd_parse_payload(const char* path, bool corrupt) {
  std::vector<uint8_t> file = read_file(path);
  if (!corrupt) {
    Aligned data(file.size());  // exactly the payload's bytes: AddressSanitizer sees any read past them
    if (!file.empty()) std::memcpy(data.data, file.data(), file.size());
    Result<ethosu::Payload> parsed = ethosu::parse_payload(data.data, data.size);
    if (!parsed.ok()) return fail(parsed.error());
    const ethosu::Payload& p = parsed.value();
    std::printf("{\"cmd\": [%zu, %u], \"weights\": [%zu, %u], \"scratch_size\": %u, ",
                static_cast<size_t>(p.cmd - data.data), p.cmd_size, static_cast<size_t>(p.weights - data.data),
                p.weights_size, p.scratch_size);
    print_ios("inputs", p, false);
    std::printf(", ");
    print_ios("outputs", p, true);
    std::printf(", \"sizeof_payload\": %zu}\n", sizeof(ethosu::Payload));
    return 0;
  }
  std::map<std::string, int> outcomes;
  auto one = [&outcomes](const uint8_t* bytes, size_t size) {
    Aligned data(size);
    if (size) std::memcpy(data.data, bytes, size);
    Result<ethosu::Payload> parsed = ethosu::parse_payload(data.data, size);
    if (!parsed.ok()) {
      ++outcomes[to_string(static_cast<PayloadFault>(parsed.error().a))];
    } else {
      ++outcomes[inside_scratch(parsed.value()) ? "parsed" : "parsed, a tensor outside the scratch"];
    }
  };
  for (size_t n = 0; n < file.size(); ++n) one(file.data(), n);
  std::vector<uint8_t> copy = file;
  for (size_t i = 0; i < copy.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      copy[i] ^= mask;
      one(copy.data(), copy.size());
      copy[i] ^= mask;
    }
  }
  std::printf("{");
  bool first = true;
  for (const auto& [k, v] : outcomes) {
    std::printf("%s\"%s\": %d", first ? "" : ", ", k.c_str(), v);
    first = false;
  }
  std::printf("}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "load") == 0) return cmd_load(argv[2]);
  if (argc >= 4 && std::strcmp(argv[1], "run") == 0) {
    const char* budget = nullptr;
    int first = 2;
    if (std::strncmp(argv[2], "--work-budget=", 14) == 0) budget = argv[first++] + 14;
    if (argc < first + 2) return 2;
    return cmd_run(argv[first], argv[first + 1], argv + first + 2, argc - first - 2, budget);
  }
  if (argc >= 4 && std::strcmp(argv[1], "sequence") == 0) {
    size_t limit = SIZE_MAX, state_bytes = SIZE_MAX;
    int first = 2;
    for (; first < argc && std::strncmp(argv[first], "--", 2) == 0; ++first) {
      if (std::strncmp(argv[first], "--buffers=", 10) == 0) limit = std::strtoul(argv[first] + 10, nullptr, 10);
      if (std::strncmp(argv[first], "--state-bytes=", 14) == 0) {
        state_bytes = std::strtoul(argv[first] + 14, nullptr, 10);
      }
    }
    if (argc < first + 3) return 2;
    return cmd_sequence(argv[first], argv[first + 1], argv + first + 2, argc - first - 2, limit, state_bytes);
  }
  if (argc >= 3 && std::strcmp(argv[1], "corrupt") == 0) {
    bool execute = false;
    size_t limit = SIZE_MAX;
    for (int i = 3; i < argc; ++i) {
      if (std::strcmp(argv[i], "--execute") == 0) execute = true;
      if (std::strcmp(argv[i], "--flip-limit") == 0 && i + 1 < argc) limit = std::strtoul(argv[++i], nullptr, 10);
    }
    return cmd_corrupt(argv[2], execute, limit);
  }
  if (argc == 2 && std::strcmp(argv[1], "result-from-ok") == 0) return cmd_result_from_ok();
  if (argc == 2 && std::strcmp(argv[1], "value-of-error") == 0) return cmd_value_of_error();
  if (argc == 5 && std::strcmp(argv[1], "print-error") == 0) {
    print_error(Error{static_cast<ErrorCode>(std::strtoul(argv[2], nullptr, 0)),
                      static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 0)),
                      static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 0))});
    return 0;
  }
  if ((argc == 3 || argc == 4) && std::strcmp(argv[1], "parse-payload") == 0) {
    if (argc == 4 && std::strcmp(argv[3], "--corrupt") != 0) return 2;
    return cmd_parse_payload(argv[2], argc == 4);
  }
  std::fprintf(stderr,
               "usage: runtime_host load FILE | run [--work-budget=N] FILE OUTDIR IN... | sequence [--buffers=K] "
               "[--state-bytes=N] FILE OUTDIR METHOD=IN,... ... | corrupt FILE [--execute] "
               "[--flip-limit N] | result-from-ok | value-of-error | print-error CODE A B | "
               "parse-payload FILE [--corrupt]\n");
  return 2;
}
