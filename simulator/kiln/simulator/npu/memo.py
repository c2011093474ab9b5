"""A cache of values bounded by their total size in bytes: what the NPU model works out once
and reuses while its inputs stay the same (feature-map address plans, decoded weights). The
key must hold every input the value depends on; the cache only bounds memory."""

from __future__ import annotations

import functools
from collections import OrderedDict


class BoundedCache:
    """Values by key; once their sizes pass `max_bytes`, the least recently used go first
    (a value larger than max_bytes is not kept)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict = OrderedDict()  # key -> (value, bytes)
        self._bytes = 0

    def get(self, key):
        """The value kept for `key`, or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key, value, nbytes: int) -> None:
        if key in self._entries:
            self._bytes -= self._entries.pop(key)[1]
        if nbytes > self.max_bytes:
            return
        self._entries[key] = (value, nbytes)
        self._bytes += nbytes
        while self._bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


def keeps(max_bytes: int):
    """Decorates a function of hashable positional arguments that returns a numpy array: its
    results, made read-only, kept by the arguments in a BoundedCache of max_bytes (the
    results' bytes and those of bytes arguments); `function.cache` is that cache."""

    def decorate(function):
        cache = BoundedCache(max_bytes)

        @functools.wraps(function)
        def kept(*args):
            value = cache.get(args)
            if value is None:
                value = function(*args)
                value.flags.writeable = False
                cache.put(args, value, value.nbytes + sum(len(a) for a in args if isinstance(a, bytes)))
            return value

        kept.cache = cache
        return kept

    return decorate
