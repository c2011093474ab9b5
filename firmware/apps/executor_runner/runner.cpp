#include "runner.h"

#include <cstring>

#include "kiln/platform.h"
#include "model.h"

namespace kiln::runner {
namespace {

using runtime::Method;
using runtime::ScalarType;
using runtime::Tensor;

constexpr size_t kCommandLineCapacity = 1024;
constexpr size_t kPathCapacity = 512;

bool starts_with(const char* text, const char* prefix) { return std::strncmp(text, prefix, std::strlen(prefix)) == 0; }

// Splits `line` in place at spaces; calls take(token) for each token.
template <typename Take>
bool for_each_token(char* line, Take take) {
  char* p = line;
  while (*p != '\0') {
    while (*p == ' ') *p++ = '\0';
    if (*p == '\0') break;
    char* token = p;
    while (*p != '\0' && *p != ' ') ++p;
    if (*p == ' ') *p++ = '\0';
    if (!take(token)) return false;
  }
  return true;
}

// `text` as a decimal number from 1 to 2^32 - 1 into `ms`: digits only (no sign, no
// spaces); false for anything else, `ms` unchanged.
bool parse_milliseconds(const char* text, uint32_t& ms) {
  uint64_t value = 0;
  if (*text == '\0') return false;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    value = value * 10 + static_cast<uint64_t>(*p - '0');
    if (value > UINT32_MAX) return false;
  }
  if (value == 0) return false;
  ms = static_cast<uint32_t>(value);
  return true;
}

bool take_option(Options& options, const char* token) {
  if (starts_with(token, "--input=")) {
    if (options.input_count == kMaxIo) {
      print("runner: more than %d --input options\n", kMaxIo);
      return false;
    }
    options.inputs[options.input_count++] = token + std::strlen("--input=");
  } else if (starts_with(token, "--output-dir=")) {
    options.output_dir = token + std::strlen("--output-dir=");
  } else if (starts_with(token, "--npu-timeout-ms=")) {
    const char* value = token + std::strlen("--npu-timeout-ms=");
    if (!parse_milliseconds(value, options.npu_timeout_ms)) {
      print("runner: --npu-timeout-ms takes a whole number of milliseconds from 1 to 4294967295, not '%s'\n", value);
      return false;
    }
  } else if (starts_with(token, "--")) {
    print("runner: unknown option '%s' (--input=PATH, --output-dir=DIR, --npu-timeout-ms=N)\n", token);
    return false;
  }  // anything else: the program name the platform passes first
  return true;
}

// "<dir>/output_<i>.bin" into `path`; false if it does not fit.
bool output_path(const char* dir, size_t index, char (&path)[kPathCapacity]) {
  const size_t length = std::strlen(dir);
  if (length + 32 > kPathCapacity) return false;
  std::memcpy(path, dir, length);
  char* p = path + length;
  std::memcpy(p, "/output_", 8);
  p += 8;
  char digits[12];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + index % 10);
    index /= 10;
  } while (index != 0);
  while (n > 0) *p++ = digits[--n];
  std::memcpy(p, ".bin", 5);
  return true;
}

const char* type_name(ScalarType type) {
  switch (type) {
    case ScalarType::kByte: return "uint8";
    case ScalarType::kChar: return "int8";
    case ScalarType::kShort: return "int16";
    case ScalarType::kInt: return "int32";
    case ScalarType::kLong: return "int64";
    case ScalarType::kFloat: return "float32";
    case ScalarType::kBool: return "bool";
    default: return "other";
  }
}

// Element i of `t` as a comparable value (floats compared as floats).
float element(const Tensor& t, uint32_t i) {
  switch (t.type) {
    case ScalarType::kFloat: return static_cast<const float*>(t.data)[i];
    case ScalarType::kChar: return static_cast<const int8_t*>(t.data)[i];
    case ScalarType::kByte:
    case ScalarType::kBool: return static_cast<const uint8_t*>(t.data)[i];
    case ScalarType::kShort: return static_cast<const int16_t*>(t.data)[i];
    case ScalarType::kInt: return static_cast<float>(static_cast<const int32_t*>(t.data)[i]);
    default: return 0.0f;
  }
}

// Whether `t` is a tensor whose bytes can be read and written (data, or no bytes at all).
bool has_memory(const Tensor* t) { return t != nullptr && (t->data != nullptr || t->nbytes == 0); }

uint32_t argmax(const Tensor& t) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < t.numel; ++i) {
    if (element(t, i) > element(t, best)) best = i;
  }
  return best;
}

}  // namespace

bool parse_options(Options& options) {
  static char line[kCommandLineCapacity];
  if (!command_line(line, sizeof(line))) return true;  // no command line: defaults
  return for_each_token(line, [&](const char* token) { return take_option(options, token); });
}

bool open_inputs(const Options& options, const Method& method, Inputs& inputs) {
  const size_t count = method.input_count();
  if (count > kMaxIo || method.output_count() > kMaxIo) {
    print("runner: the program has %u inputs and %u outputs; the runner handles at most %d each\n", unsigned(count),
          unsigned(method.output_count()), kMaxIo);
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    const Tensor* t = method.input(i);
    if (t == nullptr || t->constant || !has_memory(t)) {
      print("runner: input %u has no planned memory (it is %s)\n", unsigned(i),
            t != nullptr && t->constant ? "a constant of the program" : "not memory-planned");
      return false;
    }
  }
  for (size_t i = 0; i < method.output_count(); ++i) {
    if (!has_memory(method.output(i))) {  // Method::create refuses these; never read address 0
      print("runner: output %u has no memory\n", unsigned(i));
      return false;
    }
  }
  if (options.input_count == 0) return true;  // built-in defaults, one sample
  if (static_cast<size_t>(options.input_count) != count || count > kMaxIo) {
    print("runner: the program takes %u input(s); %d --input given\n", unsigned(count), options.input_count);
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    const uint32_t nbytes = method.input(i)->nbytes;
    HostFile& file = inputs.files[i];
    const int32_t length = file.open(options.inputs[i], HostFile::Mode::kReadBinary) ? file.length() : -1;
    if (length < 0) {
      print("runner: cannot read input %u from %s\n", unsigned(i), options.inputs[i]);
      return false;
    }
    const uint32_t samples = nbytes == 0 ? 1 : static_cast<uint32_t>(length) / nbytes;
    if (samples == 0 || static_cast<uint32_t>(length) != samples * nbytes || (i > 0 && samples != inputs.samples)) {
      print("runner: input %u (%s) has %d bytes; the program takes %u bytes per sample%s\n", unsigned(i),
            options.inputs[i], int(length), unsigned(nbytes), i > 0 ? ", as many samples as input 0" : "");
      return false;
    }
    inputs.samples = samples;
  }
  return true;
}

bool read_sample(const Method& method, Inputs& inputs) {
  for (size_t i = 0; i < method.input_count(); ++i) {
    if (!has_memory(method.input(i))) return false;  // open_inputs refused such a program
    Tensor& t = *method.input(i);
    if (inputs.files[i].is_open()) {
      if (!inputs.files[i].read(t.data, t.nbytes)) {
        print("runner: reading input %u failed\n", unsigned(i));
        return false;
      }
      continue;
    }
    const auto& given = i < kModel.default_inputs.size ? kModel.default_inputs[i] : runtime::Span<const uint8_t>();
    if (given.size == t.nbytes) {
      std::memcpy(t.data, given.data, t.nbytes);
    } else {
      std::memset(t.data, 0, t.nbytes);
    }
  }
  return true;
}

bool open_outputs(const Options& options, const Method& method, Outputs& outputs) {
  if (options.output_dir == nullptr) return true;
  if (method.output_count() > kMaxIo) {
    print("runner: the program has %u outputs; the runner writes at most %d\n", unsigned(method.output_count()),
          kMaxIo);
    return false;
  }
  for (size_t i = 0; i < method.output_count(); ++i) {
    char path[kPathCapacity];
    if (!output_path(options.output_dir, i, path) || !outputs.files[i].open(path, HostFile::Mode::kWriteBinary)) {
      print("runner: cannot write output %u to %s\n", unsigned(i), options.output_dir);
      return false;
    }
  }
  return true;
}

bool write_sample(const Method& method, Outputs& outputs) {
  for (size_t i = 0; i < method.output_count(); ++i) {
    if (!outputs.files[i].is_open() || !has_memory(method.output(i))) continue;
    const Tensor& t = *method.output(i);
    if (!outputs.files[i].write(t.data, t.nbytes)) {
      print("runner: writing output %u failed\n", unsigned(i));
      return false;
    }
  }
  return true;
}

void summarise_outputs(const Method& method) {
  for (size_t i = 0; i < method.output_count(); ++i) {
    if (!has_memory(method.output(i))) continue;  // open_inputs refused such a program
    const Tensor& t = *method.output(i);
    print("  output %u: %s [", unsigned(i), type_name(t.type));
    for (uint8_t d = 0; d < t.dim; ++d) print(d ? ", %d" : "%d", int(t.sizes[d]));
    print("], %u bytes, argmax %u\n", unsigned(t.nbytes), unsigned(argmax(t)));
  }
}

int fail(const char* what, const runtime::Error& error, int status) {
  print("%s failed: ", what);
  runtime::print_error(error);
  // A .pte for another NPU: say which target this board's NPU is (b = its CONFIG word:
  // product in bits 31..28, log2 of its MACs per cycle in bits 3..0), in kiln's spelling.
  const unsigned product = error.b >> 28;
  if (error.code == runtime::ErrorCode::kNpuTargetMismatch && product <= 2) {
    print("runner: compile the model for this NPU: kiln compile MODEL --target ethos-u%u-%u\n", 55 + 10 * product,
          1u << (error.b & 0xF));
  }
  return status;
}

int fail_inference(const runtime::Error& error, const kiln::ethosu::Driver& driver) {
  using runtime::ErrorCode;
  fail("inference", error, kExitInference);
  switch (error.code) {
    case ErrorCode::kNpuBusy:
    case ErrorCode::kNpuFault:
    case ErrorCode::kNpuIncomplete:
    case ErrorCode::kNpuTimeout:
    case ErrorCode::kNpuResetFailed: print("NPU STATUS after the failure: 0x%08x\n", unsigned(driver.status())); break;
    default: break;
  }
  return kExitInference;
}

}  // namespace kiln::runner
