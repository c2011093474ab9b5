#include "generate.h"

#include <cstring>

#include "kiln/host_file.h"
#include "kiln/platform.h"
#include "model.h"

namespace kiln::generate {
namespace {

using runtime::Method;
using runtime::Program;
using runtime::ScalarType;
using runtime::StateTensor;
using runtime::Tensor;

constexpr const char* kUsage = "--prompt=PATH, --tokens=N, --output-dir=DIR, --npu-timeout-ms=N";

bool take_option(void* context, const char* token) {
  Options& options = *static_cast<Options*>(context);
  if (const char* path = runner::option_value(token, "--prompt=")) {
    options.prompt = path;
    return true;
  }
  if (const char* count = runner::option_value(token, "--tokens=")) {
    options.tokens_given = true;
    if (runner::parse_positive(count, options.tokens) && options.tokens <= kMaxTokens) return true;
    print("runner: --tokens takes a whole number from 1 to %u, not '%s'\n", unsigned(kMaxTokens), count);
    return false;
  }
  const runner::Taken taken = runner::take_common_option(options.common, token);
  return taken == runner::Taken::kNo ? runner::other_token(token, kUsage) : taken == runner::Taken::kYes;
}

// An integer tensor's element size (0: not an integer type).
size_t integer_size(ScalarType type) {
  switch (type) {
    case ScalarType::kByte:
    case ScalarType::kChar: return 1;
    case ScalarType::kShort: return 2;
    case ScalarType::kInt: return 4;
    case ScalarType::kLong: return 8;
    default: return 0;
  }
}

// Whether `t` is an integer tensor of at least `count` elements with memory.
bool integer_tensor(const Tensor* t, uint32_t count) {
  return t != nullptr && integer_size(t->type) != 0 && t->numel >= count && t->data != nullptr;
}

// Method `name`'s inputs (`names`: what each holds) and its outputs: both integer tensors of
// at least one element, output 0 the token; output 1 (the logits), when there is one, any
// tensor with memory. False after printing why.
bool check_io(const Method& m, const char* name, const char* const (&names)[2]) {
  if (m.input_count() != 2) {
    print("runner: %s takes 2 inputs (%s, %s); this program's takes %u\n", name, names[0], names[1],
          unsigned(m.input_count()));
    return false;
  }
  for (uint32_t i = 0; i < 2; ++i) {
    if (!integer_tensor(m.input(i), 1)) {
      print("runner: %s's input %u (%s) is not an integer tensor with memory\n", name, unsigned(i), names[i]);
      return false;
    }
  }
  if (m.output_count() < 1 || !integer_tensor(m.output(0), 1)) {
    print("runner: %s's output 0 (the token) is not an integer tensor\n", name);
    return false;
  }
  const Tensor* logits = m.output(1);
  if (logits != nullptr && logits->data == nullptr && logits->nbytes != 0) {
    print("runner: %s's output 1 (the logits) has no memory\n", name);
    return false;
  }
  return true;
}

// T, the positions the KV cache holds: the smallest dim 2 of decode's state tensors of three
// or more dims (a cache [1, kv_heads, T, head_dim]); 0 when it has none.
uint32_t cache_length(const Program& decode) {
  uint32_t length = 0;
  for (size_t i = 0; i < decode.state_count(); ++i) {
    const StateTensor s = decode.state(i);
    if (s.tensor.sizes.size < 3) continue;
    const auto rows = static_cast<uint32_t>(s.tensor.sizes[2]);
    if (length == 0 || rows < length) length = rows;
  }
  return length;
}

// Creates method `name` over its own storage in kModel. kExitOk, or kExitBind after printing why.
int create(const Program& program, const char* name, const runtime::BackendTable& backends, Method& method,
           size_t& index) {
  const runtime::Result<size_t> found = program.method_index(name);
  if (!found.ok()) return runner::fail("binding the program", found.error(), runner::kExitBind);
  index = found.value();
  if (index >= runner::kModel.methods.size) {  // a build for another program
    print("runner: this build has memory for %u method(s), not method %u\n", unsigned(runner::kModel.methods.size),
          unsigned(index));
    return runner::kExitBind;
  }
  auto created = Method::create(program, index, runner::kModel.methods[index], runtime::kKernelTable, backends);
  if (!created.ok()) return runner::fail("binding the program", created.error(), runner::kExitBind);
  method = created.value();
  method.set_work_budget(runtime::runner_work_budget(method.work_per_run()));
  return runner::kExitOk;
}

// `byte` for the UART: printable ASCII as it is, others (and ' and \) as \xNN.
void print_byte(int64_t byte) {
  if (byte >= 0x20 && byte < 0x7F && byte != '\'' && byte != '\\') {
    print("%c", char(byte));
  } else {
    print("\\x%02x", unsigned(byte));
  }
}

void print_i64(int64_t value) {
  if (value < 0) print("-");
  runner::print_u64(value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value));
}

}  // namespace

bool parse_options(Options& options) { return runner::for_each_option(take_option, &options); }

int bind(const Program& program, const runtime::BackendTable& backends, Model& model) {
  size_t prefill = 0, decode = 0;
  if (int status = create(program, "prefill", backends, model.prefill, prefill)) return status;
  if (int status = create(program, "decode", backends, model.decode, decode)) return status;
  if (!check_io(model.prefill, "prefill", {"tokens", "length"}) ||
      !check_io(model.decode, "decode", {"token", "position"})) {
    return runner::kExitBind;
  }
  model.prompt_capacity = model.prefill.input(0)->numel;
  model.cache_length = cache_length(program.method(decode).value());  // decode < method_count()
  if (model.cache_length == 0) {
    print("runner: decode has no state tensor of 3 or more dimensions to read the cache length from\n");
    return runner::kExitBind;
  }
  return runner::kExitOk;
}

bool store(Tensor& t, uint32_t i, int64_t value) {
  const size_t size = integer_size(t.type);
  if (size == 0 || i >= t.numel || t.data == nullptr) return false;
  // Little-endian: the low `size` bytes are the value in the narrower type.
  std::memcpy(static_cast<uint8_t*>(t.data) + size_t{i} * size, &value, size);
  return true;
}

bool load(const Tensor& t, uint32_t i, int64_t& value) {
  const size_t size = integer_size(t.type);
  if (size == 0 || i >= t.numel || t.data == nullptr) return false;
  const uint8_t* at = static_cast<const uint8_t*>(t.data) + size_t{i} * size;
  switch (t.type) {
    case ScalarType::kByte: value = *at; return true;
    case ScalarType::kChar: value = static_cast<int8_t>(*at); return true;
    default: break;
  }
  int64_t wide = 0;
  std::memcpy(&wide, at, size);
  const unsigned shift = 64 - 8 * static_cast<unsigned>(size);  // sign-extend
  value = static_cast<int64_t>(static_cast<uint64_t>(wide) << shift) >> shift;
  return true;
}

int set_prompt(Options& options, Model& model, uint32_t& length) {
  Tensor& tokens = *model.prefill.input(0);
  const uint32_t capacity = model.prompt_capacity;
  HostFile file;
  const char* text = kDefaultPrompt;
  length = static_cast<uint32_t>(std::strlen(kDefaultPrompt));
  if (options.prompt != nullptr) {
    const int32_t size = file.open(options.prompt, HostFile::Mode::kReadBinary) ? file.length() : -1;
    if (size < 0) {
      print("runner: cannot read the prompt from %s\n", options.prompt);
      return runner::kExitUsage;
    }
    length = static_cast<uint32_t>(size);
  }
  if (length == 0 || length > capacity) {
    print("runner: the prompt has %u bytes; prefill takes 1 to %u\n", unsigned(length), unsigned(capacity));
    return runner::kExitUsage;
  }
  // Decode runs at positions length .. length + tokens - 2: each must lie in the cache.
  const uint32_t room = length > model.cache_length ? 1 : model.cache_length - length + 1;
  if (!options.tokens_given && options.tokens > room) options.tokens = room;
  if (uint64_t{length} + options.tokens - 1 > model.cache_length) {
    print("runner: --tokens=%u after a prompt of %u bytes takes decode to position %u; the cache holds %u positions\n",
          unsigned(options.tokens), unsigned(length), unsigned(length + options.tokens - 2),
          unsigned(model.cache_length));
    return runner::kExitUsage;
  }
  print("prompt: %u byte(s) '", unsigned(length));
  uint8_t chunk[64];
  for (uint32_t at = 0; at < capacity; at += sizeof chunk) {
    const uint32_t n = at >= length ? 0 : (length - at < sizeof chunk ? length - at : sizeof chunk);
    if (n != 0 && file.is_open() && !file.read(chunk, n)) {
      print("'\nrunner: reading the prompt from %s failed\n", options.prompt);
      return runner::kExitUsage;
    }
    if (n != 0 && !file.is_open()) std::memcpy(chunk, text + at, n);
    for (uint32_t k = at; k < capacity && k < at + sizeof chunk; ++k) {
      const int64_t value = k < length ? chunk[k - at] : 0;  // padded with 0 up to P
      if (k < length) print_byte(value);
      store(tokens, k, value);
    }
  }
  print("', %u token(s), prefill takes %u, the cache %u positions\n", unsigned(options.tokens), unsigned(capacity),
        unsigned(model.cache_length));
  store(*model.prefill.input(1), 0, length);
  return runner::kExitOk;
}

void print_token(uint32_t k, int64_t token, uint32_t position, const char* method) {
  print("token %u: ", unsigned(k));
  print_i64(token);
  if (token >= 0 && token < 256) {
    print(" '");
    print_byte(token);
    print("'");
  }
  print(" at %u by %s, ", unsigned(position), method);
}

void print_text(const int64_t* tokens, uint32_t count) {
  print("generated: '");
  for (uint32_t k = 0; k < count; ++k) {
    if (tokens[k] >= 0 && tokens[k] < 256) {
      print_byte(tokens[k]);
    } else {
      print("<");
      print_i64(tokens[k]);
      print(">");
    }
  }
  print("'\n");
}

}  // namespace kiln::generate
