"""kiln.isolation: a function run in a child process forked by the isolation server returns its
result, and every other way the child can end (an exception, a native crash, exit(), running out
of time or of its memory bound) is the caller's error saying which, in the words run-host's
messages use; nothing the child prints reaches the terminal; a crash does not take the server
down, and neither the server nor a child outlives the kiln process or a call it gave up on
(nor does a run of kiln.lower.vela_process's server, which shares kiln's end, ServerProcess).
The functions run are the standard library's, so the expected outcomes are known beforehand."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from kiln import isolation
from kiln.errors import HostError
from kiln.lower.vela_process import VelaProcess

MEMORY = 1 << 30
SECONDS = 30.0


def isolated(function, *args, memory: int = MEMORY, seconds: float = SECONDS):
    return isolation.in_child(function, args, memory, seconds, HostError)


def test_a_result_comes_back():
    assert isolated(sum, [1, 2, 3]) == 6
    np.testing.assert_array_equal(isolated(np.arange, 5), [0, 1, 2, 3, 4])


@pytest.mark.parametrize(
    ("function", "args", "how"),
    [
        (int, ("x",), "failed (ValueError: invalid literal for int() with base 10: 'x')"),
        (ctypes.string_at, (0,), f"crashed (signal {signal.SIGSEGV.value})"),  # a read of address 0
        (os.abort, (), f"crashed (signal {signal.SIGABRT.value})"),
        (os._exit, (3,), "crashed (it exited with status 3)"),
        (bytearray, (3 * MEMORY,), "failed (MemoryError: )"),  # beyond the bound of MEMORY more bytes
    ],
    ids=["exception", "segfault", "abort", "exit", "memory bound"],
)
def test_how_the_child_ended_is_the_callers_error(function, args, how, capfd):
    with pytest.raises(HostError) as raised:
        isolated(function, *args)
    assert str(raised.value) == how
    assert capfd.readouterr() == ("", "")  # no traceback, no native complaint


def test_a_child_that_runs_too_long_is_stopped():
    start = time.monotonic()
    with pytest.raises(HostError) as raised:
        isolated(time.sleep, 60, seconds=0.5)
    assert str(raised.value) == "ran for more than 0.5 s and was stopped"
    assert time.monotonic() - start < 10


def test_what_the_child_prints_goes_nowhere(capfd):
    assert isolated(os.write, 1, b"printed on stdout\n") == 18
    assert isolated(os.write, 2, b"printed on stderr\n") == 18
    assert capfd.readouterr() == ("", "")


def test_a_crash_ends_the_child_not_the_server():
    isolated(sum, [])
    server = isolation._SERVER._process.pid
    with pytest.raises(HostError, match="crashed"):
        isolated(os.abort)
    assert isolated(sum, [4, 5]) == 9
    assert isolation._SERVER._process.pid == server


def test_a_call_inside_a_child_forks_there():
    """The NPU model's weight decoder calls in_child from within run-host's child: there it
    forks that child (no server of its own), and the inner call's error comes back through the
    outer call as that child's exception."""
    assert isolated(eval, "__import__('kiln.isolation').isolation._SERVING") is True
    assert isolation._SERVING is False
    with pytest.raises(HostError) as raised:
        isolated(isolation.in_child, os._exit, (5,), MEMORY, SECONDS, HostError)
    assert str(raised.value) == "failed (HostError: crashed (it exited with status 5))"


def test_prepare_has_the_server_import_a_module_its_children_then_share():
    """prepare() (kiln run-host calls it before importing torch): the server imports the module
    in the background, before it forks the children of later calls. colorsys: a module nothing
    of kiln's imports."""
    isolation.prepare("colorsys")
    assert _wait_until(lambda: isolated(eval, "'colorsys' in __import__('sys').modules"))


def _ended(pid: int) -> bool:
    """The process is gone or a zombie (ended; whoever adopted it has not reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Interrupted(Exception):
    pass


def _give_up(call, server: int) -> list[int]:
    """call() given up on half a second in (an alarm's exception, as the fuzzer raises); returns
    the server's children at that moment. The exception must reach the caller within seconds."""
    seen = []

    def give_up(signum, frame):
        seen.extend(_children(server))
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, give_up)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        start = time.monotonic()
        with pytest.raises(Interrupted):
            call()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < 10
    return seen


def test_a_call_given_up_on_ends_the_server_and_its_child():
    """An exception in the caller while it waits ends the server and the running child at
    once; the next call starts a new server."""
    isolated(sum, [])
    server = isolation._SERVER._process.pid
    seen = _give_up(lambda: isolated(time.sleep, 60), server)
    assert len(seen) == 1 and _ended(server) and _wait_until(lambda: _ended(seen[0]))
    assert isolated(sum, [1]) == 1
    assert isolation._SERVER._process.pid != server


def test_a_vela_run_given_up_on_ends_vela_s_server_and_the_run(tmp_path):
    """kiln.lower.vela_process's server, the other ServerProcess: the same, and the next run
    gets its own return code, not the abandoned run's."""
    vela = VelaProcess()
    log = tmp_path / "run.log"
    assert vela.run([shutil.which("true")], log, 30) == 0
    server = vela._server._process.pid
    seen = _give_up(lambda: vela.run([shutil.which("sleep"), "60"], log, 120), server)
    assert len(seen) == 1 and _ended(server) and _wait_until(lambda: _ended(seen[0]))
    assert vela.run([shutil.which("sh"), "-c", "exit 3"], log, 30) == 3


def test_nothing_outlives_a_killed_kiln_process():
    """kiln killed outright (SIGKILL: no atexit) while a child runs: the server sees its stdin
    close, kills the child and ends."""
    script = textwrap.dedent(
        """
        import time
        from kiln import isolation
        from kiln.errors import HostError
        isolation.in_child(sum, ([],), 1 << 30, 60, HostError)
        print(isolation._SERVER._process.pid, flush=True)
        isolation.in_child(time.sleep, (60,), 1 << 30, 60, HostError)
        """
    )
    kiln = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server = int(kiln.stdout.readline())
        assert _wait_until(lambda: len(_children(server)) == 1)
        (child,) = _children(server)
    finally:
        kiln.kill()
        kiln.wait()
        kiln.stdout.close()
    assert _wait_until(lambda: _ended(server) and _ended(child))


def test_the_server_ends_with_the_kiln_process():
    script = textwrap.dedent(
        """
        from kiln import isolation
        from kiln.errors import HostError
        isolation.in_child(sum, ([],), 1 << 30, 60, HostError)
        print(isolation._SERVER._process.pid, flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert _ended(int(done.stdout))  # waited for at exit: ended before the process did
