// The generation app's steps (main.cpp runs them): its options, the methods of a language
// model's program and what it reads from them, the prompt, and the per-token UART line. The
// contract is kiln generate's (compiler/kiln/reference/generate.py), so the firmware's tokens are
// the host's:
//
//   prefill(tokens [1, P], length [1]) -> (token, logits)
//       the prompt's L bytes as tokens 0..L-1, zeros up to P; length = L
//   decode(token [1, 1], position [1]) -> (token, logits)
//       the token at `position`
// Both share the KV cache as state (the state arena, memory id 2). Of the two outputs, the token
// is the one-element integer tensor, the logits the other. Inputs and the token may be of any
// integer type (int64 as PyTorch exports them): the app reads types and shapes from the methods.
// A program without prefill reads the prompt through decode, a token at a time (the last call
// gives the first new token). The cache holds `cache_length` positions: ExecuTorch's constant
// method get_max_seq_len where the program has it, else the smallest dim 2 of decode's state
// tensors of 3 or more dims (a cache [1, heads, T, head_dim]), else no bound; the build reads it
// from the .pte (generate_plan.h, kiln.firmware.generate_plan), and the app sizes the prompt and
// the generated tokens it keeps by it. A prompt longer than it is refused, and generation stops
// when decode's next position would reach it.
//
// Options (semihosting command line): --prompt=PATH (the prompt's bytes, at most kPromptRoom;
// default kDefaultPrompt), --tokens=N (tokens to generate, prefill's one included; 1 to
// kMaxTokens, default kDefaultTokens), and the runner's --output-dir=DIR (writes logits.bin: each
// step's logits back to back) and --npu-timeout-ms=N.
#pragma once

#include <cstddef>
#include <cstdint>

#include "generate_plan.h"
#include "kiln/runtime/method.h"
#include "runner.h"

namespace kiln::generate {

constexpr const char* kDefaultPrompt = "Once upon a time";
constexpr uint32_t kDefaultTokens = 16;
constexpr uint32_t kMaxTokens = 1024;  // the generated text is kept for its last line
constexpr uint32_t kMaxPrompt = 4096;  // the prompt is kept for a program without prefill

// What the app keeps, at most, for this program: the cache bounds both the prompt and the
// tokens after it (at least one of each, for a program whose cache holds nothing).
constexpr uint32_t at_least_one(uint32_t n) { return n == 0 ? 1 : n; }
constexpr uint32_t kPromptRoom = at_least_one(plan::kCacheLength < kMaxPrompt ? plan::kCacheLength : kMaxPrompt);
constexpr uint32_t kTokenRoom = at_least_one(plan::kCacheLength < kMaxTokens ? plan::kCacheLength : kMaxTokens);

struct Options {
  runner::Options common;        // --output-dir, --npu-timeout-ms (no --input)
  const char* prompt = nullptr;  // nullptr: kDefaultPrompt
  uint32_t tokens = kDefaultTokens;
};

// Reads the command line (none at all: the defaults); false after printing why. The paths
// point into the command line's storage, which tokens() reuses: read them before token 0.
bool parse_options(Options& options);

// A generation method, bound, and which of its outputs is which.
struct Step {
  runtime::Method method;
  uint32_t token = 0;   // the output holding the next token (one integer element)
  uint32_t logits = 1;  // the other one
};

// The program's methods, bound over kModel's memory (one set of planned buffers, the state
// arena among them), and the sizes the app reads from them.
struct Model {
  bool has_prefill = false;
  Step prefill;  // bound when has_prefill
  Step decode;
  uint32_t prompt_capacity = 0;  // P: prefill's token input's elements (kPromptRoom without prefill)
  uint32_t cache_length = 0;     // positions the cache holds (UINT32_MAX: no bound found)
};

// Creates the methods with `backends` and checks their inputs and outputs as the file's comment
// describes them. kExitOk, or an exit status after printing why.
int bind(const runtime::Program& program, const runtime::BackendTable& backends, Model& model);

// Writes element `i` of integer tensor `t` (false: not an integer type, or i past it).
bool store(runtime::Tensor& t, uint32_t i, int64_t value);
// Reads element `i` of integer tensor `t` into `value` (false: not an integer type, or i past it).
bool load(const runtime::Tensor& t, uint32_t i, int64_t& value);

// The prompt: its bytes (options.prompt's file, or kDefaultPrompt), valid until the next call.
struct Prompt {
  const uint8_t* bytes = nullptr;
  uint32_t length = 0;
};
// Reads the prompt, checks it against the model (not empty, at most P, kPromptRoom and the
// cache), shortens options.tokens to what the cache holds after it (so at most kTokenRoom),
// fills prefill's inputs (with a prefill) and prints the prompt line. kExitOk, or kExitUsage
// after printing why.
int set_prompt(Options& options, Model& model, Prompt& prompt);

// Room for kTokenRoom generated tokens: the storage of the command line and the prompt, so
// valid once both are done with (the logits file open, and the prompt gone in: after prefill,
// or decode's last prompt byte).
int32_t* tokens();

// One token's line, up to its cycles (runner::print_run writes the rest):
//   token K: ID 'c' at POSITION by METHOD, ...
// 'c' is the token's byte (printable ASCII as it is, others as \xNN), left out for a token
// that is no byte (vocabularies past 256).
void print_token(uint32_t k, int64_t token, uint32_t position, const char* method);
// The generated text on one line: generated: 'bytes' (a token that is no byte as <ID>).
void print_text(const int32_t* tokens, uint32_t count);

}  // namespace kiln::generate
