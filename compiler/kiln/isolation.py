"""Native code that can crash, call exit() or run away on damaged data (tosa_reference_model's
C++ core, Vela's mlw_codec) runs where it cannot take kiln's process down: in_child() runs
function(*args) in a child process bounded in memory and time and returns its result, or raises
the caller's KilnError saying how the child ended. A foundation module: kiln.reference and the
simulator both use it.

The children are forked from one long-lived server per kiln process (main() in an interpreter of
its own, started at the first call), which imports the module of each function it is asked to run
(once, before forking) and nothing else: forking that small process costs a fraction of forking
kiln with torch loaded. So `function` is a module-level function of a module that imports only
what the work needs, and `args` pickle; both cross to the server through a pipe. In the server's
children in_child forks there (the NPU model, run in one, decodes its weights in one of its own).

The protocol, binary frames (a length is 8 bytes, little-endian):
- kiln to the server, on its stdin: length, then the pickle of (module, memory_bytes, seconds,
  work), `work` the pickle of (function, args), unpickled by the child, or None: the module
  imported only (prepare()), the reply RESULT with ("ok", None);
- the server to kiln, on its stdout: one byte, length, body: RESULT and the child's pickle of
  ("ok", result) or ("error", "<exception type>: <message>"), or ENDED and UTF-8 text saying how
  the child ended without one ("crashed (signal 11)", "ran for more than 120 s and was stopped").
The server ends when its stdin closes (kiln exited, or gave up on a request), killing a running
child first: nothing it starts outlives kiln.
"""

from __future__ import annotations

import atexit
import faulthandler
import functools
import importlib
import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import IO, TypeVar

from kiln.errors import KilnError

T = TypeVar("T")

RESULT, ENDED = b"r", b"e"
_LENGTH = struct.Struct("<Q")
_SERVING = False  # True in the server and the children it forks: in_child forks here


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


def in_child(
    function: Callable[..., T], args: tuple, memory_bytes: int, seconds: float, error: Callable[[str], KilnError]
) -> T:
    """function(*args) in a child process with at most `memory_bytes` more address space than
    the process it is forked from and `seconds` to finish; its result comes back pickled. If the
    child raises, crashes, exits or runs out of time, raises error(how), `how` saying which
    ("crashed (signal 11)", "crashed (it exited with status 1)", "ran for more than 120 s and was
    stopped", "failed (ValueError: ...)"). The child writes no core file, no Python traceback
    and prints nothing. `function` must be importable by its module and name, `args` picklable."""
    if _SERVING:
        kind, body = forked(lambda: function(*args), memory_bytes, seconds)
    else:
        kind, body = _ask_server(function, args, memory_bytes, seconds)
    if kind == ENDED:
        raise error(body.decode())
    status, result = pickle.loads(body)
    if status != "ok":
        raise error(f"failed ({result})")
    return result


def forked(
    work: Callable[[], object],
    memory_bytes: int,
    seconds: float,
    inherited: tuple[int, ...] = (),
    watch: int | None = None,
) -> tuple[bytes, bytes]:
    """work() in a child forked from this process, bounded as in_child says: (RESULT, the child's
    pickle of ("ok", result) or ("error", "Type: message")), or (ENDED, how it ended without
    one). The child closes the file descriptors `inherited` first. EOFError, the child killed,
    when `watch` (a descriptor nothing is written to while the child runs) becomes readable."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(work, memory_bytes, (read, *inherited), write)  # never returns
    os.close(write)
    chunks, deadline, finished, timed_out = [], time.monotonic() + seconds, False, False
    try:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([read] if watch is None else [read, watch], [], [], left)[0] if left > 0 else []
            if not ready:
                timed_out = True
                break
            if read not in ready:
                raise EOFError("the watched descriptor became readable while a child ran")
            chunk = os.read(read, 1 << 20)
            if not chunk:
                finished = True
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        if not finished:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return ENDED, f"ran for more than {seconds:g} s and was stopped".encode()
    if not chunks:
        code = os.waitstatus_to_exitcode(status)
        how = f"crashed (signal {-code})" if code < 0 else f"crashed (it exited with status {code})"
        return ENDED, how.encode()
    return RESULT, b"".join(chunks)


def _child(work: Callable[[], object], memory_bytes: int, close: tuple[int, ...], write: int) -> None:
    """The forked child: limits, then work() with its output silenced; its outcome pickled to
    `write`. Ends the process (status 1 if even that failed)."""
    status = 0
    try:
        for fd in close:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        faulthandler.disable()  # where the parent enabled it, as pytest does
        os.environ["PATH"] = ""  # tosa_reference_model's fault handler would start gdb, for seconds
        resource.setrlimit(resource.RLIMIT_AS, (address_space() + memory_bytes, resource.RLIM_INFINITY))
        try:
            with quiet_native_output():
                message = ("ok", work())
        except BaseException as raised:  # noqa: BLE001 - reported to the parent
            message = ("error", f"{type(raised).__name__}: {raised}")
        with os.fdopen(write, "wb") as out:
            out.write(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
    except BaseException:  # noqa: BLE001 - the parent reports the lost child
        status = 1
    os._exit(status)


# ---- kiln's side


class ServerProcess:
    """kiln's end of a long-lived helper process (`argv`: this module's server, or
    kiln.lower.vela_process's) that answers one request at a time on its stdin and stdout:
    started at the first request, shared by the process's threads (one request at a time),
    started again once when it ended without answering, and ended and waited for when the
    process exits or a request is interrupted (KeyboardInterrupt, an alarm's exception: its reply
    would be read as the next request's). Ending it closes its stdin; the server ends when its
    stdin closes."""

    def __init__(self, argv: list[str], name: str):
        self._argv, self._name = argv, name
        self._forget()
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._forget)  # a forked copy of kiln starts its own

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def ask(self, exchange: Callable[[IO[bytes], IO[bytes]], T | None]) -> T:
        """exchange(the server's stdin, its stdout): writes one request, reads its reply and
        returns it, or None when the server ended before answering. OSError if a server started
        again does not answer either."""
        with self._lock:
            for _ in range(2):
                if self._process is None or self._process.poll() is not None:
                    self._stop()
                    self._process = subprocess.Popen(
                        self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
                    )
                try:
                    reply = exchange(self._process.stdin, self._process.stdout)
                except OSError:
                    reply = None
                except BaseException:
                    self._stop()
                    raise
                if reply is not None:
                    return reply
                self._stop()
        raise OSError(f"{self._name} ended without answering")

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        for pipe in (process.stdin, process.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Ends the server and waits for it, so none outlives kiln."""
        with self._lock:
            self._stop()


_SERVER = ServerProcess([sys.executable, "-c", "from kiln.isolation import main; main()"], "kiln's isolation server")


def _ask_server(function: Callable, args: tuple, memory_bytes: int, seconds: float) -> tuple[bytes, bytes]:
    """forked()'s outcome of function(*args), run by the server."""
    work = pickle.dumps((function, args), pickle.HIGHEST_PROTOCOL)
    request = pickle.dumps((function.__module__, memory_bytes, seconds, work), pickle.HIGHEST_PROTOCOL)
    return _SERVER.ask(functools.partial(_exchange, request))


def prepare(module: str, wait: bool = False) -> None:
    """Starts the server and has it import `module`, so that the first in_child call on one of
    its functions finds both ready: in the background for a process with other work to do first
    (kiln run-host imports torch meanwhile), or before returning if `wait` (a caller that times
    its in_child calls). A server that fails here is started again by that call, which reports
    what goes wrong."""

    def ask():
        try:
            _SERVER.ask(functools.partial(_exchange, pickle.dumps((module, 0, 0.0, None), pickle.HIGHEST_PROTOCOL)))
        except OSError:
            pass

    if wait:
        ask()
    else:
        threading.Thread(target=ask, daemon=True).start()


def _exchange(request: bytes, requests: IO[bytes], replies: IO[bytes]) -> tuple[bytes, bytes] | None:
    """ServerProcess.ask's exchange of one request (a pickle) for its reply (kind, body)."""
    requests.write(_LENGTH.pack(len(request)) + request)
    requests.flush()
    kind, head = replies.read(1), replies.read(_LENGTH.size)
    body = replies.read(_LENGTH.unpack(head)[0]) if len(head) == _LENGTH.size else b""
    if kind not in (RESULT, ENDED) or len(head) != _LENGTH.size or len(body) != _LENGTH.unpack(head)[0]:
        return None
    return kind, body


# ---- the server's side


def serve(requests: int, replies: int) -> None:
    """Runs each request read from `requests` in a forked child, one at a time, replying to each
    on `replies`, until `requests` closes."""
    global _SERVING
    _SERVING = True
    with os.fdopen(requests, "rb") as incoming, os.fdopen(replies, "wb") as outgoing:
        while True:
            module, memory_bytes, seconds, work = _request(incoming)
            if module is None:
                return
            try:  # in the server, once: what its children then share
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - the child's own import reports it
                pass
            if work is None:  # prepare(): the import only
                _reply(outgoing, RESULT, pickle.dumps(("ok", None)))
                continue
            try:
                kind, body = forked(
                    functools.partial(_call, work), memory_bytes, seconds, inherited=(requests, replies), watch=requests
                )
            except EOFError:
                return
            _reply(outgoing, kind, body)


def _reply(outgoing: IO[bytes], kind: bytes, body: bytes) -> None:
    outgoing.write(kind + _LENGTH.pack(len(body)) + body)
    outgoing.flush()


def _request(incoming: IO[bytes]) -> tuple:
    """The next request's (module, memory_bytes, seconds, work); all None once kiln closed the pipe."""
    head = incoming.read(_LENGTH.size)
    body = incoming.read(_LENGTH.unpack(head)[0]) if len(head) == _LENGTH.size else b""
    if not body:
        return None, None, None, None
    return pickle.loads(body)


def _call(work: bytes) -> object:
    function, args = pickle.loads(work)
    return function(*args)


def main() -> None:
    """The server's process: the protocol on descriptors of their own, 0 and 1 on /dev/null (what
    native code prints goes nowhere), Ctrl-C left to kiln, which then closes the server's stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    serve(requests, replies)
