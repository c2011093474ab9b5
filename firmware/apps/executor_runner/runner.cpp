#include "runner.h"

#include <cstring>

#include "kiln/platform.h"
#include "kiln_board.h"
#include "model.h"

namespace kiln::runner {
namespace {

using runtime::Method;
using runtime::ScalarType;
using runtime::Tensor;

constexpr const char* kUsage = "--input=PATH, --model=NAME, --output-dir=DIR, --npu-timeout-ms=N, --atol=X, --rtol=X";

// The index of the model named `name` in kModels, or kModels.size.
uint32_t find_model(const char* name) {
  uint32_t k = 0;
  while (k < kModels.size && std::strcmp(kModels[k].name, name) != 0) ++k;
  return k;
}

bool take_model(Options& options, const char* name) {
  const uint32_t k = find_model(name);
  if (k == kModels.size) {
    print("runner: no model '%s' in this image; it has", name);
    for (const ModelMemory& m : kModels) print(" %s", m.name);
    print("\n");
    return false;
  }
  if (options.step_count == kMaxSteps) {
    print("runner: more than %d --model options\n", kMaxSteps);
    return false;
  }
  options.steps[options.step_count++] = Step{k, options.input_count, 0};
  return true;
}

bool take_option(void* context, const char* token) {
  Options& options = *static_cast<Options*>(context);
  if (const char* path = option_value(token, "--input=")) {
    if (options.input_count == kMaxIo) {
      print("runner: more than %d --input options\n", kMaxIo);
      return false;
    }
    options.inputs[options.input_count++] = path;
    if (options.step_count > 0) ++options.steps[options.step_count - 1].input_count;
    return true;
  }
  if (const char* name = option_value(token, "--model=")) return take_model(options, name);
  const bool atol = option_value(token, "--atol=") != nullptr;
  if (atol || option_value(token, "--rtol=") != nullptr) {
    const char* value = token + 7;  // both names are 7 characters with their '='
    if (parse_decimal(value, atol ? options.atol : options.rtol)) return true;
    print("runner: %s takes a decimal such as 0.01, not '%s'\n", atol ? "--atol" : "--rtol", value);
    return false;
  }
  const Taken taken = take_common_option(options, token);
  return taken == Taken::kNo ? other_token(token, kUsage) : taken == Taken::kYes;
}

// Without --model: model 0 with every input (one model), or each model once on its own inputs.
bool settle_steps(Options& options) {
  if (options.step_count > 0) {
    if (options.steps[0].first_input > 0) {
      print("runner: an --input before the first --model; give each model's inputs after its --model\n");
      return false;
    }
    for (int a = 0; options.output_dir != nullptr && a < options.step_count; ++a) {
      for (int b = a + 1; b < options.step_count; ++b) {
        if (options.steps[a].model != options.steps[b].model) continue;
        print("runner: --model=%s comes twice; with --output-dir its second run's outputs would replace the first's\n",
              kModels[options.steps[a].model].name);
        return false;
      }
    }
    return true;
  }
  if (kModels.size > 1 && options.input_count > 0) {
    print("runner: this image has %u models: name the one the inputs are for with --model=NAME\n",
          unsigned(kModels.size));
    return false;
  }
  if (kModels.size > kMaxSteps) {
    print("runner: the image has %u models; name at most %d with --model\n", unsigned(kModels.size), kMaxSteps);
    return false;
  }
  for (uint32_t k = 0; k < kModels.size; ++k) options.steps[options.step_count++] = Step{k, 0, options.input_count};
  return true;
}

// "<dir>/<model>_output_<i>.bin" (`model` nullptr: "<dir>/output_<i>.bin") into `path`; false
// if it does not fit.
bool output_path(const char* dir, const char* model, size_t index, char (&path)[kPathCapacity]) {
  char name[kPathCapacity];
  const size_t length = model == nullptr ? 0 : std::strlen(model) + 1;
  if (length + 32 > sizeof(name)) return false;
  if (model != nullptr) {
    std::memcpy(name, model, length - 1);
    name[length - 1] = '_';
  }
  std::memcpy(name + length, "output_", 7);
  char* p = name + length + 7;
  char digits[12];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + index % 10);
    index /= 10;
  } while (index != 0);
  while (n > 0) *p++ = digits[--n];
  std::memcpy(p, ".bin", 5);
  return path_in(dir, name, path);
}

}  // namespace

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

namespace {

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
  static char line[kCommandLineCapacity];  // options' paths point into it for the whole run
  return for_each_option(line, take_option, &options) && settle_steps(options);
}

bool for_each_option(char (&line)[kCommandLineCapacity], bool (*take)(void* context, const char* token),
                     void* context) {
  if (!command_line(line, sizeof(line))) return true;  // no command line: defaults
  char* p = line;  // split in place at spaces
  while (*p != '\0') {
    while (*p == ' ') *p++ = '\0';
    if (*p == '\0') break;
    char* token = p;
    while (*p != '\0' && *p != ' ') ++p;
    if (*p == ' ') *p++ = '\0';
    if (!take(context, token)) return false;
  }
  return true;
}

const char* option_value(const char* token, const char* name) {
  const size_t n = std::strlen(name);
  return std::strncmp(token, name, n) == 0 ? token + n : nullptr;
}

bool parse_positive(const char* text, uint32_t& value) {
  uint64_t v = 0;
  if (*text == '\0') return false;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*p - '0');
    if (v > UINT32_MAX) return false;
  }
  if (v == 0) return false;
  value = static_cast<uint32_t>(v);
  return true;
}

bool parse_decimal(const char* text, double& value) {
  double v = 0.0, unit = 1.0;
  bool digits = false, fraction = false;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p == '.' && !fraction) {
      fraction = true;
    } else if (*p >= '0' && *p <= '9') {
      digits = true;
      if (fraction) {
        unit /= 10.0;
        v += unit * (*p - '0');
      } else {
        v = v * 10.0 + (*p - '0');
      }
    } else {
      return false;
    }
  }
  if (!digits) return false;
  value = v;
  return true;
}

Taken take_common_option(Options& options, const char* token) {
  if (const char* dir = option_value(token, "--output-dir=")) {
    options.output_dir = dir;
    return Taken::kYes;
  }
  const char* value = option_value(token, "--npu-timeout-ms=");
  if (value == nullptr) return Taken::kNo;
  if (parse_positive(value, options.npu_timeout_ms)) return Taken::kYes;
  print("runner: --npu-timeout-ms takes a whole number of milliseconds from 1 to 4294967295, not '%s'\n", value);
  return Taken::kBad;
}

bool other_token(const char* token, const char* usage) {
  if (std::strncmp(token, "--", 2) != 0) return true;  // the program name the platform passes first
  print("runner: unknown option '%s' (%s)\n", token, usage);
  return false;
}

bool path_in(const char* dir, const char* name, char (&path)[kPathCapacity]) {
  const size_t length = std::strlen(dir), more = std::strlen(name);
  if (length + 1 + more + 1 > kPathCapacity) return false;
  std::memcpy(path, dir, length);
  path[length] = '/';
  std::memcpy(path + length + 1, name, more + 1);
  return true;
}

void print_u64(uint64_t value) {
  constexpr uint64_t kBillion = 1000000000u;
  if (value < (uint64_t{1} << 32)) {
    print("%u", unsigned(value));
  } else {
    print_u64(value / kBillion);
    print("%09u", unsigned(value % kBillion));
  }
}

bool open_inputs(const Options& options, const Step& step, const Method& method, Inputs& inputs) {
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
  if (step.input_count == 0) return true;  // built-in defaults, one sample
  if (static_cast<size_t>(step.input_count) != count || count > kMaxIo) {
    print("runner: %s takes %u input(s); %d --input given\n", kModels[step.model].name, unsigned(count),
          step.input_count);
    return false;
  }
  const char* const* paths = options.inputs + step.first_input;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t nbytes = method.input(i)->nbytes;
    HostFile& file = inputs.files[i];
    const int32_t length = file.open(paths[i], HostFile::Mode::kReadBinary) ? file.length() : -1;
    if (length < 0) {
      print("runner: cannot read input %u from %s\n", unsigned(i), paths[i]);
      return false;
    }
    const uint32_t samples = nbytes == 0 ? 1 : static_cast<uint32_t>(length) / nbytes;
    if (samples == 0 || static_cast<uint32_t>(length) != samples * nbytes || (i > 0 && samples != inputs.samples)) {
      print("runner: input %u (%s) has %d bytes; the program takes %u bytes per sample%s\n", unsigned(i), paths[i],
            int(length), unsigned(nbytes), i > 0 ? ", as many samples as input 0" : "");
      return false;
    }
    inputs.samples = samples;
  }
  return true;
}

bool read_sample(const ModelMemory& model, const Method& method, Inputs& inputs) {
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
    const auto& given = i < model.default_inputs.size ? model.default_inputs[i] : runtime::Span<const uint8_t>();
    if (given.size == t.nbytes) {
      std::memcpy(t.data, given.data, t.nbytes);
    } else {
      std::memset(t.data, 0, t.nbytes);
    }
  }
  return true;
}

bool open_outputs(const Options& options, const char* model, const Method& method, Outputs& outputs) {
  if (options.output_dir == nullptr) return true;
  if (method.output_count() > kMaxIo) {
    print("runner: the program has %u outputs; the runner writes at most %d\n", unsigned(method.output_count()),
          kMaxIo);
    return false;
  }
  for (size_t i = 0; i < method.output_count(); ++i) {
    char path[kPathCapacity];
    if (!output_path(options.output_dir, model, i, path) ||
        !outputs.files[i].open(path, HostFile::Mode::kWriteBinary)) {
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

}  // namespace kiln::runner
