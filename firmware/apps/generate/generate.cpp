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
using runtime::Tensor;

constexpr const char* kUsage = "--prompt=PATH, --tokens=N, --output-dir=DIR, --npu-timeout-ms=N";

// The app's one buffer, sized for this program (generate.h): first the command line and the
// prompt, then the generated tokens over both.
//
//   offset 0                        kCommandLineCapacity          + kPromptRoom
//   | command line (parse_options)  | prompt's bytes (set_prompt) |
//   | generated tokens, int32 (tokens()): kTokenRoom of them ...
//
// The command line lives until main has opened the logits file (the options' paths point into
// it), the prompt until it has gone in (prefill, or decode's last prompt byte); token 0 is
// written after both.
struct Input {
  char line[runner::kCommandLineCapacity];
  uint8_t prompt[kPromptRoom];
};
union Text {
  Input input;
  int32_t tokens[kTokenRoom];
};
Text g_text;
uint8_t* const g_prompt = g_text.input.prompt;

bool take_option(void* context, const char* token) {
  Options& options = *static_cast<Options*>(context);
  if (const char* path = runner::option_value(token, "--prompt=")) {
    options.prompt = path;
    return true;
  }
  if (const char* count = runner::option_value(token, "--tokens=")) {
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

// Whether `t` is an integer tensor of at least one element with memory.
bool integer_tensor(const Tensor* t) {
  return t != nullptr && integer_size(t->type) != 0 && t->numel >= 1 && t->data != nullptr;
}

// Method `name`'s inputs (`names`: what each holds: integer tensors) and outputs (two, the token
// the one one-element integer tensor, the logits the other, with memory): `step`'s roles. False
// after printing why.
bool check_io(Step& step, const char* name, const char* const (&names)[2]) {
  const Method& m = step.method;
  if (m.input_count() != 2) {
    print("runner: %s takes 2 inputs (%s, %s); this program's takes %u\n", name, names[0], names[1],
          unsigned(m.input_count()));
    return false;
  }
  for (uint32_t i = 0; i < 2; ++i) {
    if (!integer_tensor(m.input(i))) {
      print("runner: %s's input %u (%s) is not an integer tensor with memory\n", name, unsigned(i), names[i]);
      return false;
    }
  }
  uint32_t tokens = 0;
  for (uint32_t o = 0; o < m.output_count(); ++o) {
    if (integer_tensor(m.output(o)) && m.output(o)->numel == 1) {
      step.token = o;
      ++tokens;
    }
  }
  if (m.output_count() != 2 || tokens != 1) {
    print("runner: %s returns %u tensors; generation needs two: the next token (one integer) and the logits\n", name,
          unsigned(m.output_count()));
    return false;
  }
  step.logits = 1 - step.token;
  return true;
}

// Creates method `index` over its own storage in kModel. kExitOk, or kExitBind after printing why.
int create(const Program& program, size_t index, const runtime::BackendTable& backends, Method& method) {
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

// The prompt's length in bytes, read into g_prompt when it is at most kPromptRoom (else left
// unread: set_prompt refuses it); -1 after printing why.
int32_t read_prompt(const char* path) {
  if (path == nullptr) {
    const size_t n = std::strlen(kDefaultPrompt);
    if (n <= kPromptRoom) std::memcpy(g_prompt, kDefaultPrompt, n);
    return static_cast<int32_t>(n);
  }
  HostFile file;
  const int32_t size = file.open(path, HostFile::Mode::kReadBinary) ? file.length() : -1;
  if (size < 0 || (static_cast<uint32_t>(size) <= kPromptRoom && !file.read(g_prompt, static_cast<size_t>(size)))) {
    print("runner: cannot read the prompt from %s\n", path);
    return -1;
  }
  return size;
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

bool parse_options(Options& options) { return runner::for_each_option(g_text.input.line, take_option, &options); }

int32_t* tokens() { return g_text.tokens; }

int bind(const Program& program, const runtime::BackendTable& backends, Model& model) {
  const runtime::Result<size_t> decode = program.method_index("decode");
  if (!decode.ok()) return runner::fail("binding the program", decode.error(), runner::kExitBind);
  const runtime::Result<size_t> prefill = program.method_index("prefill");
  model.has_prefill = prefill.ok();
  if (model.has_prefill) {
    if (int status = create(program, prefill.value(), backends, model.prefill.method)) return status;
    if (!check_io(model.prefill, "prefill", {"tokens", "length"})) return runner::kExitBind;
  }
  if (int status = create(program, decode.value(), backends, model.decode.method)) return status;
  if (!check_io(model.decode, "decode", {"token", "position"})) return runner::kExitBind;
  model.prompt_capacity = model.has_prefill ? model.prefill.method.input(0)->numel : kPromptRoom;
  model.cache_length = plan::kCacheLength;
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

int set_prompt(Options& options, Model& model, Prompt& prompt) {
  const int32_t read = read_prompt(options.prompt);
  if (read < 0) return runner::kExitUsage;
  const auto length = static_cast<uint32_t>(read);
  uint32_t most = model.prompt_capacity < model.cache_length ? model.prompt_capacity : model.cache_length;
  if (most > kPromptRoom) most = kPromptRoom;  // a cache past kMaxPrompt: the app's own bound
  if (length == 0 || length > most) {
    print("runner: the prompt has %u bytes; this program takes 1 to %u\n", unsigned(length), unsigned(most));
    return runner::kExitUsage;
  }
  // Decode writes the cache at positions length .. length + tokens - 2: generation stops before
  // the cache's end, as kiln generate's does. So tokens <= kTokenRoom: at most kMaxTokens, and at
  // most the cache's positions.
  if (uint64_t{length} + options.tokens - 1 > model.cache_length) options.tokens = model.cache_length - length + 1;
  print("prompt: %u byte(s) '", unsigned(length));
  for (uint32_t k = 0; k < length; ++k) print_byte(g_prompt[k]);
  print("', %u token(s), prefill takes %u, the cache %u positions\n", unsigned(options.tokens),
        unsigned(model.has_prefill ? model.prompt_capacity : 0), unsigned(model.cache_length));
  if (model.has_prefill) {
    Tensor& tokens = *model.prefill.method.input(0);
    for (uint32_t k = 0; k < model.prompt_capacity; ++k) store(tokens, k, k < length ? g_prompt[k] : 0);
    store(*model.prefill.method.input(1), 0, length);
  }
  prompt = Prompt{g_prompt, length};
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

void print_text(const int32_t* tokens, uint32_t count) {
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
