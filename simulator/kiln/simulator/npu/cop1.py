"""The COP1 driver payload that Vela writes (`cmd_data`): little-endian 32-bit words.

Layout: the fourcc 'COP1'; then driver actions, each a tag word (action id in bits 7..0,
bits 15..8 and 31..16 action-specific) and its operands:
  CONFIG (1):     2 words follow: the CONFIG register value, the ID register value;
  CMD_STREAM (2): length in words = (bits 15..8 << 16) | bits 31..16; that many command
                  words follow;
  READ_APB (3), DUMP_SHRAM (4), NOP (5): no operand words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import Cop1Error

FOURCC = b"COP1"
ACTION_CONFIG = 0x01
ACTION_CMD_STREAM = 0x02
ACTION_READ_APB = 0x03
ACTION_DUMP_SHRAM = 0x04
ACTION_NOP = 0x05


@dataclass(frozen=True)
class Cop1:
    config_word: int
    id_word: int
    stream: np.ndarray  # uint32 command words


def parse_cop1(payload: bytes) -> Cop1:
    data = bytes(payload)
    if len(data) < 4 or data[:4] != FOURCC:
        raise Cop1Error(f"not a COP1 payload: starts with {data[:4]!r}, expected {FOURCC!r}")
    if len(data) % 4:
        raise Cop1Error(f"COP1 payload length {len(data)} is not a multiple of 4 bytes")
    words = np.frombuffer(data, dtype="<u4")
    config_word = id_word = None
    stream = None
    i = 1
    while i < len(words):
        tag = int(words[i])
        action = tag & 0xFF
        i += 1
        if action == ACTION_CONFIG:
            if i + 2 > len(words):
                raise Cop1Error("COP1 config action is truncated (needs CONFIG and ID words)")
            config_word, id_word = int(words[i]), int(words[i + 1])
            i += 2
        elif action == ACTION_CMD_STREAM:
            length = (((tag >> 8) & 0xFF) << 16) | (tag >> 16)
            if i + length > len(words):
                raise Cop1Error(f"COP1 command stream claims {length} words but only {len(words) - i} follow")
            if stream is not None:
                raise Cop1Error("COP1 payload holds more than one command stream")
            stream = words[i : i + length].astype(np.uint32)
            i += length
        elif action in (ACTION_NOP, ACTION_READ_APB, ACTION_DUMP_SHRAM):
            pass
        else:
            raise Cop1Error(f"unknown COP1 driver action 0x{action:02x} at word {i - 1}")
    if config_word is None:
        raise Cop1Error("COP1 payload has no config action")
    if stream is None:
        raise Cop1Error("COP1 payload has no command stream")
    return Cop1(config_word, id_word, stream)
