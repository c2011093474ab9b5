// The executor runner's steps: options from the semihosting command line, inputs
// from host files (or the built-in defaults), outputs to host files, and the UART
// summary; and what the generation app (firmware/apps/generate) shares with it: the
// command line's options and the failures (the NPU, its backend and the run lines: npu.h).
//
// Options: --input=PATH (once per program input, in order), --output-dir=DIR and
// --npu-timeout-ms=N. An input file holds one or more samples back to back (k * the
// input's bytes; every input the same k); the runner runs k inferences and writes
// output_<i>.bin with the k results of output i back to back. Paths contain no spaces
// (the command line is split at spaces). --npu-timeout-ms: how long the driver waits
// for each command stream's completion interrupt (kiln::ethosu::RunOptions::timeout_ms,
// 1 to 4294967295 ms; default the driver's 10000) before it resets the NPU and the
// inference fails with kNpuTimeout.
// An image of several models (kModels) runs them in the sequence of --model=NAME options,
// each with the --input options that follow it (none: its built-in inputs), and without
// --model every model once, in image order, on its built-in inputs; before each model's
// inferences it prints "model NAME", and with --output-dir writes NAME_output_<i>.bin.
//
// A bundle (ExecuTorch's BundledProgram, .bpte) baked in instead of a .pte: the runner runs
// every case of every method suite (run_bundle) and checks each output against the case's
// expected one within --atol=X and --rtol=Y (decimals, default 0: exact), exiting
// kExitMismatch when one is outside; --input and --output-dir do not apply.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/host_file.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/method.h"
#include "model.h"

namespace kiln::runner {

// Exit statuses: each failure class has its own.
enum Exit : int {
  kExitOk = 0,
  kExitUsage = 2,     // bad command line, missing/short input file, output not writable
  kExitLoad = 3,      // the .pte or bundle was rejected (Program::load, Bundle::load, a case unlike its method)
  kExitNpu = 4,       // no NPU answers at the board's address
  kExitBind = 5,      // Method::create failed (kernels, buffers, a delegate's init)
  kExitInference = 6, // execute() failed
  kExitMismatch = 7,  // a bundle's output differs from its expected one beyond the tolerance
};

// Program inputs and outputs the runner reads and writes, each: a path pointer and a
// HostFile on main's stack (the stack is the board's stack_size, 32 KiB on corstone-300).
constexpr int kMaxIo = 64;
constexpr int kMaxSteps = 16;  // --model options

// One model's turn in the sequence: kModels[model] with inputs[first_input, + input_count).
struct Step {
  uint32_t model = 0;
  int first_input = 0;
  int input_count = 0;
};

struct Options {
  const char* inputs[kMaxIo] = {};  // every --input, in order
  int input_count = 0;
  Step steps[kMaxSteps] = {};  // after parse_options, the sequence (at least one step)
  int step_count = 0;
  const char* output_dir = nullptr;  // nullptr: outputs are only summarised
  uint32_t npu_timeout_ms = 0;  // --npu-timeout-ms; 0: the driver's default (npu.h's start_npu)
  double atol = 0.0, rtol = 0.0;  // a bundle's tolerance: |actual - expected| <= atol + rtol * |expected|
};

// Reads the command line (none at all: no options) and settles the sequence of steps.
bool parse_options(Options& options);

// Bundle mode (bundle_check.cpp): `size` bytes at `data` are a bundle (Bundle::is_bundle).
// Loads it and its program, runs each case and prints per output its largest difference and
// whether it is within the tolerance (docs/running.md states the lines); kExitOk when every
// output is, kExitMismatch when one is not, kExitLoad for a damaged bundle or a case that does
// not fit its method (printed), or the status of another failure.
int run_bundle(const uint8_t* data, size_t size, const Options& options);

// --- Shared with the generation app --------------------------------------------------

constexpr size_t kPathCapacity = 512;
// The command line's bytes with its terminating 0 (kiln.simulator.run refuses a longer one).
constexpr size_t kCommandLineCapacity = 1024;

// Reads the command line into `line` (the caller's storage; the tokens point into it, so it
// must hold them as long as any is used), then calls take(context, token) for each
// space-separated token (the first is the program's name); false as soon as take returns
// false. No command line: true.
bool for_each_option(char (&line)[kCommandLineCapacity], bool (*take)(void* context, const char* token), void* context);
// The value of `token` when it is `name` followed by it ("--tokens=" and "--tokens=8": "8"),
// else nullptr.
const char* option_value(const char* token, const char* name);
// `text` as a decimal number from 1 to 2^32 - 1 into `value`: digits only (no sign, no
// spaces); false for anything else, `value` unchanged.
bool parse_positive(const char* text, uint32_t& value);
// `text` as a non-negative decimal, digits with an optional fraction ("0", "0.01", "2."), into
// `value`; false for anything else (a sign, an exponent, no digit), `value` unchanged.
bool parse_decimal(const char* text, double& value);
// The options both apps take: --output-dir=DIR and --npu-timeout-ms=N. kYes: taken; kNo: not
// one of them; kBad: one of them with a bad value (printed).
enum class Taken { kYes, kNo, kBad };
Taken take_common_option(Options& options, const char* token);
// A token no option took: false (after printing "runner: unknown option ... (usage)") when it
// starts with "--"; true for anything else (the program's name the platform passes first).
bool other_token(const char* token, const char* usage);
// "<dir>/<name>" into `path`; false if it does not fit.
bool path_in(const char* dir, const char* name, char (&path)[kPathCapacity]);

// `value` in decimal (the console's %u takes 32 bits).
void print_u64(uint64_t value);

// Open input files and the number of samples they hold; false (after printing why) for a
// program with an input or output that has no memory.
struct Inputs {
  HostFile files[kMaxIo];
  uint32_t samples = 1;
};
bool open_inputs(const Options& options, const Step& step, const runtime::Method& method, Inputs& inputs);
// Fills every input tensor with its next sample (or `model`'s default). Called before every
// inference: execute() consumes the inputs (kiln/runtime/method.h), so none is reused.
bool read_sample(const ModelMemory& model, const runtime::Method& method, Inputs& inputs);

struct Outputs {
  HostFile files[kMaxIo];
};
// `model`: its name starts each file's name (NAME_output_<i>.bin), or nullptr (output_<i>.bin).
bool open_outputs(const Options& options, const char* model, const runtime::Method& method, Outputs& outputs);
bool write_sample(const runtime::Method& method, Outputs& outputs);

// The name of a scalar type as the UART lines give it ("int8", "float32"; "other").
const char* type_name(runtime::ScalarType type);

// One line per output: type, sizes, bytes and the index of its largest element.
void summarise_outputs(const runtime::Method& method);

// Prints "<what> failed: " and the error (runtime::print_error: one line), and
// returns `status`. A delegate compiled for another NPU (kNpuTargetMismatch) adds a line
// naming the --target this board's NPU needs.
int fail(const char* what, const runtime::Error& error, int status);

}  // namespace kiln::runner
