"""tinylm: a Llama-family decoder language model with a KV cache and two methods, ``prefill``
and ``decode``, for generating text on a microcontroller (issue 29).

The layers are llama_block's (Touvron et al., 2023): RMSNorm written by hand, rotary
embeddings from cos/sin tables ([context, head_dim] buffers) and ``rotate_half``,
grouped-query attention (key/value heads repeated by ``expand`` and ``reshape``) through
``F.scaled_dot_product_attention``, the SwiGLU feed-forward, no biases, a final RMSNorm and
the output projection (tied to the embedding where the config says so).

Each attention layer owns its cache: buffers ``k_cache`` and ``v_cache``, float32
[1, kv_heads, context, head_dim], zeros at construction, written in place by
``index_copy_(2, positions, k)``. The two methods (integer inputs int64, as PyTorch indexes):

- ``prefill(tokens [1, P], length [1]) -> (token [1], logits [1, vocab])``: the P positions
  attend causally among themselves and write cache rows 0..P-1; the hidden state at position
  length - 1 is picked by ``index_select`` before the final norm and the head. A prompt shorter
  than P is right-padded (with 0): the padding's cache rows are overwritten by the decode steps
  that follow before any query may attend them.
- ``decode(token [1, 1], position [1]) -> (token, logits)``: rotary rows by ``index_select``;
  writes cache row ``position``, then attends over all context rows with the mask
  ``arange(context) <= position``.

``token`` is ``logits.argmax(-1)``, greedy decoding. ``forward`` is ``decode``. The module
carries the attributes kiln reads: ``kiln_methods`` (method name -> example inputs),
``kiln_calibration`` (a sequence of method calls that kiln replays on the float model, state
carried along): per calibration prompt, a prefill and 16 decode steps following the float
model's greedy tokens; and ``kiln_constants``, ExecuTorch's constant methods
``get_max_seq_len`` (the context) and ``get_vocab_size``.

Two configs. ``TINYLM``: byte-level (vocab 256), width 128, 4 layers of 4 query and 2
key/value heads, feed-forward 384, context 128, prompt 32 (0.85M parameters), trained here on
the text of Python's ``pydoc_data.topics`` (it ships with Python; the last 5 % is held out for
validation) by next-byte prediction: seeded, on one thread (the weights are then the same bit
for bit on any machine), AdamW, 800 steps of 16 windows, about 3.5 minutes of one core. The
trained weights are kept on disk (``kiln.paths.cache_dir()``, the file named by a hash of
everything that decides them, written atomically) and in memory, so a process trains only when
no earlier one has. ``python -m kiln.models.tinylm`` prints the losses and a sample per prompt;
with ``--train`` it trains anew first, printing the loss curve.
``SMOLLM2_135M``: SmolLM2-135M's shape (Allal et al., 2025: vocab 49152, width 576, 30 layers,
9 query and 3 key/value heads, feed-forward 1536, tied embeddings) with seeded random weights,
never trained; built only when asked for (135M parameters).

``ModelUnderTest`` and ``ModelInputs`` (the decode example inputs) are built on first access,
not at import, so importing this module neither trains nor reads the cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import built_on_first_access, seeded
from kiln.models.llama_block import RMSNorm, repeat_heads, rotary_tables, rotate_half


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """A decoder's shape. ``context`` (T) is the cache's length, the number of positions a
    generation may reach; ``prompt`` (P) the number of positions a prefill takes at once."""

    vocab: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    hidden: int  # the SwiGLU feed-forward's width
    context: int
    prompt: int
    theta: float = 10_000.0  # rotary base
    eps: float = 1e-5  # RMSNorm's
    tied: bool = False  # the head shares the embedding's weights

    def __post_init__(self) -> None:
        if self.dim % self.heads or self.heads % self.kv_heads or (self.dim // self.heads) % 2:
            raise ValueError(f"{self}: heads must divide dim into even head widths and kv_heads divide heads")
        if not 0 < self.prompt <= self.context:
            raise ValueError(f"{self}: the prompt must fit the context")


TINYLM = LMConfig(vocab=256, dim=128, layers=4, heads=4, kv_heads=2, hidden=384, context=128, prompt=32)
# SmolLM2-135M's config.json: rope_theta 100000, rms_norm_eps 1e-5, tie_word_embeddings.
SMOLLM2_135M = LMConfig(
    vocab=49152,
    dim=576,
    layers=30,
    heads=9,
    kv_heads=3,
    hidden=1536,
    context=128,
    prompt=32,
    theta=100_000.0,
    eps=1e-5,
    tied=True,
)

SEED = 29
INIT_STD = 0.02  # Llama's and SmolLM2's initializer_range
STEPS = 800
BATCH = 16
LEARNING_RATE = 3e-3
WARMUP = 100
WEIGHT_DECAY = 0.1
VALIDATION_FRACTION = 20  # the last 1/20 (5 %) of the corpus
CALIBRATION_DECODES = 16


class Attention(nn.Module):
    """Grouped-query attention with its KV cache."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.dim // config.heads
        self.q_proj = nn.Linear(config.dim, config.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.dim, config.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.dim, config.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.heads * self.head_dim, config.dim, bias=False)
        cache = torch.zeros(1, config.kv_heads, config.context, self.head_dim)
        self.register_buffer("k_cache", cache, persistent=False)
        self.register_buffer("v_cache", cache.clone(), persistent=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [batch, L, dim] at the positions whose rotary rows cos and sin [L, head_dim] hold.

        - positions None: causal among x's L positions; the cache is left alone (training).
        - positions (int64 [L], batch 1), mask None: the same, and x's keys and values written
          to cache rows `positions` (prefill).
        - positions and mask (bool [L, context]): keys and values written to the cache, then
          every cache row that mask keeps is attended (decode).
        """
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if positions is not None:
            self.k_cache.index_copy_(2, positions, k)
            self.v_cache.index_copy_(2, positions, v)
        if mask is not None:
            k, v = self.k_cache, self.v_cache
        groups = self.heads // self.kv_heads
        k, v = repeat_heads(k, groups), repeat_heads(v, groups)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.o_proj(x.transpose(1, 2).reshape(batch, length, -1))


class DecoderLayer(nn.Module):
    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.dim, config.eps)
        self.attn = Attention(config)
        self.post_attention_norm = RMSNorm(config.dim, config.eps)
        self.w1 = nn.Linear(config.dim, config.hidden, bias=False)  # gate
        self.w3 = nn.Linear(config.dim, config.hidden, bias=False)  # up
        self.w2 = nn.Linear(config.hidden, config.dim, bias=False)  # down

    def forward(self, x: torch.Tensor, *where: torch.Tensor | None) -> torch.Tensor:
        """`where`: the attention's cos, sin, positions and mask (Attention.forward)."""
        x = x + self.attn(self.input_norm(x), *where)
        h = self.post_attention_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TinyLM(nn.Module):
    """The decoder of `config`, weights drawn from the current random state: normal with
    standard deviation INIT_STD, norm scales 1."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.dim)
        self.layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.layers)])
        self.norm = RMSNorm(config.dim, config.eps)
        self.head = nn.Linear(config.dim, config.vocab, bias=False)
        for name, parameter in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(parameter)
            else:
                nn.init.normal_(parameter, std=INIT_STD)
        if config.tied:
            self.head.weight = self.embed.weight
        cos, sin = rotary_tables(config.context, config.dim // config.heads, config.theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("prompt_positions", torch.arange(config.prompt), persistent=False)
        self.register_buffer("cache_positions", torch.arange(config.context), persistent=False)

    def sequence_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens int64 [batch, L <= context] -> logits [batch, L, vocab], causal, at positions
        0..L-1; no cache is read or written (training)."""
        length = tokens.shape[1]
        return self.head(self.norm(self._hidden(tokens, self.cos[:length], self.sin[:length])))

    def prefill(self, tokens: torch.Tensor, length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens int64 [1, P] (a prompt right-padded to P), length int64 [1] (the prompt's, 1..P)
        -> the next token int64 [1] and its logits [1, vocab]; writes cache rows 0..P-1."""
        prompt = self.config.prompt
        h = self._hidden(tokens, self.cos[:prompt], self.sin[:prompt], self.prompt_positions)
        return self._next(h.index_select(1, length - 1))

    def decode(self, token: torch.Tensor, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """token int64 [1, 1] at position int64 [1] (< context) -> the next token int64 [1] and
        its logits [1, vocab]; writes cache row `position`, attends rows 0..position."""
        cos, sin = self.cos.index_select(0, position), self.sin.index_select(0, position)
        mask = (self.cache_positions <= position)[None]
        return self._next(self._hidden(token, cos, sin, position, mask))

    forward = decode

    def reset_cache(self) -> None:
        """Every cache row back to zeros, as at construction."""
        for layer in self.layers:
            layer.attn.k_cache.zero_()
            layer.attn.v_cache.zero_()

    def _hidden(self, tokens: torch.Tensor, *where: torch.Tensor | None) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, *where)
        return x

    def _next(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.norm(h)).squeeze(1)
        return logits.argmax(-1), logits


# ---------------------------------------------------------------- the corpus and training


@functools.cache
def corpus() -> bytes:
    """The training text: Python's pydoc topics (the help() pages of the language reference),
    UTF-8, about 466 KB; it ships with Python, so nothing is downloaded."""
    from pydoc_data import topics

    return "".join(topics.topics.values()).encode()


def splits() -> tuple[bytes, bytes]:
    """(training text, validation text): the validation text is the corpus's last 5 %."""
    text = corpus()
    cut = len(text) - len(text) // VALIDATION_FRACTION
    return text[:cut], text[cut:]


def _as_tokens(text: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).to(torch.int64)


def loss(model: TinyLM, text: bytes, windows: int | None = None) -> float:
    """Mean next-byte cross-entropy, nats per byte, over `text` cut into windows of context + 1
    bytes (each predicting its last context bytes): all of them, or `windows` evenly spaced ones."""
    data, span = _as_tokens(text), model.config.context + 1
    starts = torch.arange(0, len(data) - span + 1, span)
    if windows is not None and windows < len(starts):
        starts = starts[torch.linspace(0, len(starts) - 1, windows).long()]
    total = 0.0
    with torch.no_grad(), _one_thread():
        for batch in starts.split(BATCH):
            rows = data[batch[:, None] + torch.arange(span)]
            logits = model.sequence_logits(rows[:, :-1])
            total += F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten(), reduction="sum").item()
    return total / (len(starts) * (span - 1))


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    # One thread: the order of floating-point reductions, and so the trained weights bit for
    # bit, then do not depend on the machine's core count.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _schedule(step: int) -> float:
    """The learning rate's factor at `step`: a linear warm-up over WARMUP steps, then a cosine
    down to a tenth at STEPS."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    done = (step - WARMUP) / max(1, STEPS - WARMUP)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * done))


def train(config: LMConfig = TINYLM, log: Callable[[str], None] | None = None) -> dict[str, torch.Tensor]:
    """Train a TinyLM of `config` on the training text (seeded, one thread, AdamW, STEPS steps
    of BATCH random windows of context + 1 bytes) and return its state_dict. `log`, if given,
    is called with a line of progress every 100 steps."""
    data, span = _as_tokens(splits()[0]), config.context + 1
    with _one_thread(), seeded(SEED):
        model = TinyLM(config)
        windows = torch.Generator().manual_seed(SEED)
        decay = [p for p in model.parameters() if p.dim() > 1]
        rest = [p for p in model.parameters() if p.dim() <= 1]
        groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=LEARNING_RATE, betas=(0.9, 0.95))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule)
        model.train()
        start, running = time.process_time(), 0.0
        for step in range(STEPS):
            starts = torch.randint(0, len(data) - span + 1, (BATCH,), generator=windows)
            rows = data[starts[:, None] + torch.arange(span)]
            logits = model.sequence_logits(rows[:, :-1])
            step_loss = F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
            optimizer.zero_grad()
            step_loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running += step_loss.item()
            if log is not None and (step + 1) % 100 == 0:
                log(f"step {step + 1:5d}  loss {running / 100:.3f}  {time.process_time() - start:6.1f} s of CPU")
                running = 0.0
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _cache_file(config: LMConfig) -> Path:
    """The trained weights' file, named by a hash of everything that decides them: the config,
    the training constants, torch's version, the corpus and the source of the code that builds
    and trains the model (an edit elsewhere, e.g. to generation, keeps the file)."""
    from kiln.paths import cache_dir

    code = (TinyLM, DecoderLayer, Attention, RMSNorm, rotary_tables, rotate_half, repeat_heads)
    code += (train, _schedule, _one_thread, seeded, splits, _as_tokens)
    recipe = {
        "config": dataclasses.asdict(config),
        "training": [SEED, INIT_STD, STEPS, BATCH, LEARNING_RATE, WARMUP, WEIGHT_DECAY, VALIDATION_FRACTION],
        "torch": torch.__version__,
        "corpus": hashlib.sha256(corpus()).hexdigest(),
        "code": hashlib.sha256("".join(map(inspect.getsource, code)).encode()).hexdigest(),
    }
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"tinylm-{key}.pt"


@functools.cache
def trained_state(config: LMConfig = TINYLM) -> dict[str, torch.Tensor]:
    """The trained weights of `config`: from the disk cache if an earlier process left them
    there, else trained (and saved: to a temporary file renamed into place, so processes
    training at once each write a whole file and the last rename wins)."""
    path = _cache_file(config)
    with contextlib.suppress(OSError, RuntimeError, EOFError, pickle.UnpicklingError):
        return torch.load(path, weights_only=True)
    state = train(config)
    _save(state, path)
    return state


def _save(state: dict[str, torch.Tensor], path: Path) -> None:
    """`state` to `path` if the file system lets us (else nowhere: the weights are made again)."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(state, file)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)


# ---------------------------------------------------------------- generation


# Prompts for agreement measurements (float model, quantized program, firmware): openings of
# the training text's pages, each shorter than the prefill's 32 positions.
PROMPTS: tuple[bytes, ...] = (
    b'The "if" statement',
    b"A class definition ",
    b'The "import" statement',
    b"Assignment statements",
    b"Exceptions are ",
    b"def f(",
    b"for i in range(",
    b"Objects, values and types",
)


def _padded(model: TinyLM, prompt: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """prefill's inputs for `prompt`: its bytes right-padded with 0 to P, and its length."""
    limit = model.config.prompt
    if not 0 < len(prompt) <= limit:
        raise ValueError(f"a prompt of {len(prompt)} tokens: prefill takes 1 to {limit}")
    tokens = torch.zeros(1, limit, dtype=torch.int64)
    tokens[0, : len(prompt)] = torch.tensor(list(prompt))
    return tokens, torch.tensor([len(prompt)])


def greedy_calls(
    model: TinyLM, prompt: bytes, tokens: int
) -> tuple[list[tuple[str, tuple[torch.Tensor, ...]]], list[int]]:
    """Greedy generation of `tokens` tokens after `prompt` (token ids, one per byte): the method
    calls it makes in order (a prefill, then tokens - 1 decodes at positions len(prompt),
    len(prompt) + 1, ...) and the generated token ids. Runs them on `model`, whose cache they
    overwrite, on one thread (the tokens are then the same on any machine)."""
    last = len(prompt) + tokens - 2  # the last decode's position
    if tokens < 1 or last >= model.config.context:
        raise ValueError(
            f"{tokens} tokens after a prompt of {len(prompt)}: positions reach {last}, the context holds "
            f"{model.config.context}"
        )
    calls: list[tuple[str, tuple[torch.Tensor, ...]]] = [("prefill", _padded(model, prompt))]
    with torch.no_grad(), _one_thread():
        token, _ = model.prefill(*calls[0][1])
        generated = [int(token)]
        for position in range(len(prompt), last + 1):
            calls.append(("decode", (token.view(1, 1), torch.tensor([position]))))
            token, _ = model.decode(*calls[-1][1])
            generated.append(int(token))
    return calls, generated


def generate(model: TinyLM, prompt: bytes, tokens: int) -> bytes:
    """The `tokens` bytes a byte-level model generates greedily after `prompt` (1 to P bytes)."""
    if model.config.vocab != 256:
        raise ValueError(f"generate takes a byte-level model (vocab 256), not vocab {model.config.vocab}")
    return bytes(greedy_calls(model, prompt, tokens)[1])


# ---------------------------------------------------------------- the zoo's entries

# Calibration prompts: from the training text, not among PROMPTS, of lengths 8 to 32.
CALIBRATION_PROMPTS: tuple[bytes, ...] = (
    b'The "while" statement is used f',
    b"The return value of",
    b"   >>> print(",
    b"Changed ",
)
# shape -> (config, trained on the corpus: else random weights)
SHAPES = {"tinylm": (TINYLM, True), "smollm2_135m": (SMOLLM2_135M, False)}


def build(shape: str = "tinylm") -> tuple[TinyLM, tuple[torch.Tensor, ...]]:
    """The model of SHAPES[shape] (eval mode, cache zeros) with its kiln_methods and
    kiln_calibration, and decode's example inputs."""
    config, trained = SHAPES[shape]
    with seeded(SEED):
        model = TinyLM(config)
    if trained:
        model.load_state_dict(trained_state(config))
    model.eval()
    calls = [call for prompt in CALIBRATION_PROMPTS for call in greedy_calls(model, prompt, CALIBRATION_DECODES + 1)[0]]
    model.kiln_calibration = calls
    model.kiln_methods = {"prefill": calls[0][1], "decode": calls[1][1]}
    model.kiln_constants = {"get_max_seq_len": config.context, "get_vocab_size": config.vocab}
    model.reset_cache()
    return model, model.kiln_methods["decode"]


# Training happens when the model is first asked for, not at import.
__getattr__ = built_on_first_access(globals(), build)


def main(argv: list[str]) -> int:
    """python -m kiln.models.tinylm [--train]: the trained model's losses and a sample per
    prompt; with --train, trained anew (the loss curve printed) and the disk cache rewritten."""
    if argv not in ([], ["--train"]):
        print("usage: python -m kiln.models.tinylm [--train]", file=sys.stderr)
        return 2
    if argv:
        start, cpu = time.perf_counter(), time.process_time()
        state = train(TINYLM, log=print)
        print(f"trained in {time.perf_counter() - start:.1f} s ({time.process_time() - cpu:.1f} s of CPU)")
        _save(state, _cache_file(TINYLM))
        trained_state.cache_clear()
    model, _ = build()
    training, validation = splits()
    print(f"{sum(p.numel() for p in model.parameters())} parameters")
    print(f"loss, nats per byte: train {loss(model, training, 512):.4f} validation {loss(model, validation):.4f}")
    for prompt in PROMPTS:
        print(repr(prompt + generate(model, prompt, 64)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
