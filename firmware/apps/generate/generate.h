// The generation app's steps (main.cpp runs them): its options, the two methods of a language
// model's program and what it reads from them, the prompt, and the per-token UART line.
//
// The program (kiln/runtime/program.h) has methods "prefill" and "decode" sharing the KV
// cache as state (the state arena, memory id 2):
//   prefill(tokens [1, P], length [1]) -> (token [1], logits [1, vocab])
//       the prompt's L bytes as tokens 0..L-1, zeros up to P; length = L
//   decode(token [1, 1], position [1]) -> (token [1], logits [1, vocab])
//       the token at `position`; the cache holds positions 0..T-1
// Inputs and the output token are integer tensors of any integer type (int64 as PyTorch
// exports them); the app reads types and shapes from the methods, never assumes them.
//
// Options (semihosting command line): --prompt=PATH (the prompt's bytes; default
// kDefaultPrompt), --tokens=N (tokens to generate, prefill's one included, at most kMaxTokens;
// default kDefaultTokens, or as many as the cache holds after the prompt when fewer), and the
// runner's --output-dir=DIR (writes logits.bin:
// each step's logits, output 1 of the method that ran it, back to back) and
// --npu-timeout-ms=N.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/method.h"
#include "runner.h"

namespace kiln::generate {

constexpr const char* kDefaultPrompt = "Once upon a time";
constexpr uint32_t kDefaultTokens = 16;
constexpr uint32_t kMaxTokens = 1024;  // the generated text is kept for its last line

struct Options {
  runner::Options common;        // --output-dir, --npu-timeout-ms (no --input)
  const char* prompt = nullptr;  // nullptr: kDefaultPrompt
  uint32_t tokens = kDefaultTokens;
  bool tokens_given = false;  // --tokens given: a run past the cache is refused, not shortened
};

// Reads the command line (none at all: the defaults); false after printing why.
bool parse_options(Options& options);

// The program's two methods, bound over kModel's memory (one set of planned buffers, the state
// arena among them), and the sizes the app reads from them.
struct Model {
  runtime::Method prefill;
  runtime::Method decode;
  uint32_t prompt_capacity = 0;  // P: prefill's token input's elements
  uint32_t cache_length = 0;     // T: positions the KV cache holds (cache_length in generate.cpp)
};

// Creates both methods with `backends`; checks their inputs and outputs as the file's comment
// describes them. kExitOk, or an exit status after printing why.
int bind(const runtime::Program& program, const runtime::BackendTable& backends, Model& model);

// Writes element `i` of integer tensor `t` (false: not an integer type, or i past it).
bool store(runtime::Tensor& t, uint32_t i, int64_t value);
// Reads element `i` of integer tensor `t` into `value` (false: not an integer type, or i past it).
bool load(const runtime::Tensor& t, uint32_t i, int64_t& value);

// Fills prefill's inputs with the prompt (options.prompt, or kDefaultPrompt) and prints the
// prompt line; its length in `length`; without --tokens, shortens options.tokens to what the
// cache holds after the prompt. kExitOk, or kExitUsage after printing why (no such file, an
// empty prompt, a prompt longer than P, --tokens past the cache).
int set_prompt(Options& options, Model& model, uint32_t& length);

// One token's line, up to its cycles (runner::print_run writes the rest):
//   token K: ID 'c' at POSITION by METHOD, ...
// 'c' is the token's byte (printable ASCII as it is, others as \xNN), left out for a token
// that is no byte (vocabularies past 256).
void print_token(uint32_t k, int64_t token, uint32_t position, const char* method);
// The generated text on one line: generated: 'bytes' (a token that is no byte as <ID>).
void print_text(const int64_t* tokens, uint32_t count);

}  // namespace kiln::generate
