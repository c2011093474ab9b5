"""Native code that can crash, call exit() or run away on damaged data (tosa_reference_model's
C++ core, Vela's mlw_codec), run where it cannot take kiln's process down: in_child() runs a
function in a forked child bounded in memory and time and returns its result, or raises the
caller's KilnError saying how the child ended. A foundation module: kiln.reference and the
simulator both use it."""

from __future__ import annotations

import faulthandler
import os
import pickle
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

from kiln.errors import KilnError

T = TypeVar("T")


@contextmanager
def quiet_native_output():
    """File descriptors 1 and 2 on /dev/null for the block: what native code prints (a version
    notice per graph, a complaint on damaged data) does not reach the user's terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def address_space() -> int:
    """This process's virtual memory in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def in_child(function: Callable[[], T], memory_bytes: int, seconds: float, error: Callable[[str], KilnError]) -> T:
    """function() in a forked child with at most `memory_bytes` more address space than this
    process and `seconds` to finish; its result comes back pickled through a pipe. If the child
    raises, crashes, exits or runs out of time, raises error(how), `how` saying which ("crashed
    (signal 11)", "ran for more than 120 s and was stopped", "failed (ValueError: ...)"). The
    child writes no core file, no Python traceback and prints nothing."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        status = 0
        try:
            os.close(read)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            faulthandler.disable()  # where the parent enabled it, as pytest does
            os.environ["PATH"] = ""  # tosa_reference_model's fault handler would start gdb, for seconds
            resource.setrlimit(resource.RLIMIT_AS, (address_space() + memory_bytes, resource.RLIM_INFINITY))
            try:
                with quiet_native_output():
                    message = ("ok", function())
            except BaseException as raised:  # noqa: BLE001 - reported to the parent
                message = ("error", f"{type(raised).__name__}: {raised}")
            with os.fdopen(write, "wb") as out:
                out.write(pickle.dumps(message))
        except BaseException:  # noqa: BLE001 - the parent reports the lost child
            status = 1
        os._exit(status)
    os.close(write)
    chunks, deadline, finished = [], time.monotonic() + seconds, False
    try:
        with os.fdopen(read, "rb") as pipe:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([pipe], [], [], left)[0]:
                    raise error(f"ran for more than {seconds:g} s and was stopped")
                chunk = os.read(pipe.fileno(), 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finished = True
    finally:
        if not finished:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if not chunks:
        code = os.waitstatus_to_exitcode(status)
        raise error(f"crashed (signal {-code})" if code < 0 else f"crashed (it exited with status {code})")
    kind, result = pickle.loads(b"".join(chunks))
    if kind != "ok":
        raise error(f"failed ({result})")
    return result
