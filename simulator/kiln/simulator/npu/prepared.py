"""Operations prepared once and run many times.

A command stream sets the same registers before each of its operations every time it runs
(kiln.simulator.npu.executor records them), so what an operation works out from its registers
alone (shapes, the scales and their rounding, where its feature maps lie in memory, the checks
that refuse what is not modelled) is the same on every run of the stream with the same region
bases and sizes. A family's `prepare` works that out once and returns the operation's
data-dependent rest, a callable run(ctx) reading the memory, the SHRAM and the chaining buffers
as they are when it runs; running an operation is preparing it and running that at once, so
the first run and every later one compute alike.

Contract of a prepared operation: it depends on its command, the registers, the configuration
and the region bases and sizes of the Context it was prepared with, and on nothing else that a
run can change; it keeps no reference to the register file (which later commands change). What it
leaves to run time may read ctx.registers then: the executor runs it with the registers it was
prepared with (kiln.simulator.npu.executor, a recorded stream's frozen copy).

Faults keep their place: a check that refuses the registers is made while preparing, but the
error is raised where the operation reaches it when it runs (after the memory reads that come
before it), with the coverage the operation had recorded by then. A Step holds that: the hits
of one stage of an operation and the error preparing it raised, if any.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kiln.errors import NpuStreamError

Run = Callable[..., None]  # run(ctx): a prepared operation's data-dependent rest


class Hits(list):
    """The coverage a stage records when it runs: (category, value) in order."""

    def hit(self, category: str, value: str) -> None:
        self.append((category, value))


@dataclass
class Step:
    """One stage of a prepared operation: the coverage it records and the error its
    preparation raised (None: none)."""

    hits: Hits = field(default_factory=Hits)
    error: Exception | None = None

    def enter(self, coverage) -> None:
        """Records the stage's coverage, then raises its error if it has one."""
        if self.hits:
            coverage.hit_all(self.hits)
        if self.error is not None:
            raise self.error


def step(prepare: Callable, *args):
    """(Step, prepare(hits, *args)): the stage `prepare` works out, with the hits it made; when
    it refuses the registers (an NpuStreamError: RegisterError, NotModelled), the Step holds the error and the value
    is None."""
    hits = Hits()
    try:
        return Step(hits), prepare(hits, *args)
    except NpuStreamError as error:
        return Step(hits, error), None
