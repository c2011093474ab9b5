"""`kiln generate`: text from a language model's program on the host (kiln run-host's arithmetic),
the reference a firmware's generation must equal token for token and logit for logit.

The program's contract (a model with methods, kiln.frontend.state; ExecuTorch's LLM runner keeps a
similar one): method `prefill` takes the prompt's tokens [1, P] (padded with 0 to the program's P)
and how many of them there are [1]; method `decode` takes one token [1, 1] and its position [1].
A program without prefill reads the prompt through decode, a token at a time (ExecuTorch's LLM
runner does so for a program of one method).
Each returns the next token (its one-element integer output) and the logits (its other output),
and both share the state (the key/value cache) that the calls carry from one to the next. Tokens
are bytes (a byte-level model's vocabulary). Where the program has ExecuTorch's constant method
`get_max_seq_len`, a generation that would pass it stops there, as the cache holds no more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiln.errors import UsageError
from kiln.pte.llm import DECODE, MAX_SEQ_LEN, PREFILL, constant_method
from kiln.pte.reader import deserialize
from kiln.pte.schema import NUMPY_DTYPES, ExecutionPlan, Tensor
from kiln.reference import run_host


@dataclass
class Step:
    """One generated token: where it goes in the sequence, and the logits it was picked from."""

    position: int
    token: int
    logits: np.ndarray


def roles(plan: ExecutionPlan) -> tuple[int, int]:
    """(index of the token output, index of the logits output) of a generation method."""
    outputs = [plan.values[i] for i in plan.outputs]
    tokens = [k for k, t in enumerate(outputs) if _is_integer(t) and math.prod(t.sizes) == 1]
    if len(outputs) != 2 or len(tokens) != 1:
        raise UsageError(
            f"method {plan.name} returns {len(outputs)} tensors; kiln generate needs two: the next token "
            "(one integer) and the logits"
        )
    return tokens[0], 1 - tokens[0]


def _is_integer(t: Tensor) -> bool:
    return np.issubdtype(NUMPY_DTYPES.get(t.scalar_type, np.float32), np.integer)


def _input(plan: ExecutionPlan, k: int, values: list[int]) -> np.ndarray:
    t = plan.values[plan.inputs[k]]
    if not _is_integer(t) or int(np.prod(t.sizes)) < len(values):
        raise UsageError(f"method {plan.name}'s input {k} is {t.scalar_type.name} {list(t.sizes)}: not token ids")
    array = np.zeros(int(np.prod(t.sizes)), NUMPY_DTYPES[t.scalar_type])
    array[: len(values)] = values
    return array.reshape(t.sizes)


def generate(data: bytes, prompt: bytes, tokens: int) -> list[Step]:
    """Prefill with `prompt` (or, in a program without prefill, decode it a token at a time), then
    decode until `tokens` tokens are generated (greedy, as the program picks them) or the cache is
    full."""
    f = deserialize(data)
    methods = f.methods()
    if DECODE not in methods:
        raise UsageError(f"the program has methods {', '.join(methods)}; kiln generate needs decode (and prefill)")
    decode = f.method(DECODE)
    if len(decode.inputs) != 2:
        raise UsageError("decode takes (token, position); this program's does not")
    if tokens < 1:
        raise UsageError(f"--tokens {tokens}: generate at least one token")
    limit = constant_method(f, MAX_SEQ_LEN)
    if not prompt or (limit is not None and len(prompt) > limit):
        raise UsageError(f"the prompt has {len(prompt)} bytes; this program takes 1 to {limit}")
    state: dict[str, np.ndarray] = {}
    token_at, logits_at = roles(decode)

    def step(method: ExecutionPlan, inputs: list[np.ndarray], position: int, roles: tuple[int, int]) -> Step:
        outputs = run_host._run(f, inputs, method.name, state)
        return Step(position, int(outputs[roles[0]].reshape(-1)[0]), outputs[roles[1]])

    if PREFILL in methods:
        prefill = f.method(PREFILL)
        room = int(np.prod(prefill.values[prefill.inputs[0]].sizes)) if len(prefill.inputs) == 2 else 0
        if not room:
            raise UsageError("prefill takes (tokens, length); this program's does not")
        if len(prompt) > room:
            raise UsageError(f"the prompt has {len(prompt)} bytes; this program's prefill takes 1 to {room}")
        inputs = [_input(prefill, 0, list(prompt)), _input(prefill, 1, [len(prompt)])]
        steps = [step(prefill, inputs, len(prompt), roles(prefill))]
    else:  # the prompt through decode, a token at a time: the last call gives the first new token
        for position, token in enumerate(prompt):
            first = step(
                decode, [_input(decode, 0, [token]), _input(decode, 1, [position])], position + 1, (token_at, logits_at)
            )
        steps = [first]
    position = len(prompt)
    while len(steps) < tokens and (limit is None or position < limit):  # decode writes the cache at `position`
        inputs = [_input(decode, 0, [steps[-1].token]), _input(decode, 1, [position])]
        position += 1
        steps.append(step(decode, inputs, position, (token_at, logits_at)))
    return steps


def text(steps: list[Step]) -> str:
    """The generated bytes as text (bytes that are not UTF-8 shown as escapes)."""
    return bytes(s.token & 0xFF for s in steps).decode("utf-8", errors="backslashreplace")
