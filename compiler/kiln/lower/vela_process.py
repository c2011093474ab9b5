"""One long-lived process per kiln process that runs each Vela command kiln asks for.

It imports Vela once and forks a child per run, so a run costs a fork rather than an
interpreter start plus Vela's imports, which are most of the time Vela takes on a small graph.
Each run is still a process of its own: a crash in Vela's C++ core ends that child only, and
the run's return code says so as subprocess would (negative: the signal).

The protocol, one JSON line each way per run:
- kiln to the server, on its stdin: {"argv": [...], "cwd": str, "log": str, "timeout": float}
  (argv[0] the executable; the run's stdout and stderr both go to the file `log`; `timeout` in
  seconds);
- the server to kiln, on its stdout: {"returncode": int}, or {"timeout": true} when it killed
  a run that outlived its timeout.
When argv[0] is the Vela script installed beside this interpreter (installed_vela()), Vela's
main() runs in the forked child with argv[1:], as that script would run it; any other command
is exec'd in the child. The server ends when its stdin closes, i.e. with the kiln process.

This module imports nothing of kiln's (the server is `python -m kiln.lower.vela_process`).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO

_POLL_S = (0.001, 0.02)  # first and longest pause between checks on a running child


def installed_vela() -> Path:
    """The Vela script pip installs beside this interpreter (it may be absent)."""
    return Path(sys.executable).with_name("vela")


# ---- kiln's side


class VelaProcess:
    """kiln's end of the server: started at the first run, shared by the process's threads
    (one run at a time), and ended and waited for when the process exits (close)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._server: subprocess.Popen | None = None
        atexit.register(self.close)

    def run(self, argv: list[str], log: Path, timeout_s: float) -> int | None:
        """The return code of `argv` run with its output to `log`, or None when it outlived
        `timeout_s` and was killed. A server that ended (killed from outside) is started again
        once; an OSError when that one does not answer either."""
        job = json.dumps({"argv": argv, "cwd": os.getcwd(), "log": str(log), "timeout": timeout_s})
        with self._lock:
            for _ in range(2):
                reply = self._ask(job)
                if reply is not None:
                    return None if reply.get("timeout") else int(reply["returncode"])
                self._server = None
        raise OSError("kiln's Vela process ended without answering")

    def _ask(self, job: str) -> dict | None:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "kiln.lower.vela_process"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        try:
            self._server.stdin.write(job + "\n")
            self._server.stdin.flush()
            line = self._server.stdout.readline()
        except OSError:
            return None
        return json.loads(line) if line else None

    def close(self) -> None:
        """Ends the server (its stdin closes) and waits for it, so none outlives kiln."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None and server.poll() is None:
            server.stdin.close()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


# ---- the server's side


def serve(requests: IO[str], replies: IO[str]) -> None:
    """Runs each job of `requests` in a forked child, one at a time, replying to each."""
    for line in requests:
        replies.write(json.dumps(_run(json.loads(line))) + "\n")
        replies.flush()


def _run(job: dict) -> dict:
    pid = os.fork()
    if pid == 0:
        _child(job)  # never returns
    deadline = time.monotonic() + float(job["timeout"])
    pause = _POLL_S[0]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}
        time.sleep(pause)
        pause = min(2 * pause, _POLL_S[1])


def _child(job: dict) -> None:
    """The forked child: stdin from /dev/null, stdout and stderr to the job's log, then Vela's
    main() or exec. Ends the process with the run's status."""
    status = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.chdir(job["cwd"])
        argv = [str(a) for a in job["argv"]]
        if argv[0] == str(installed_vela()):
            status = _vela_main(argv)
        else:
            try:
                os.execv(argv[0], argv)
            except OSError as error:
                print(f"cannot run {argv[0]}: {error}", file=sys.stderr)
                status = 127
    except SystemExit as stop:  # Vela's argparse, or sys.exit inside Vela
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # printed as the Vela script would print it; the status says it failed
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _vela_main(argv: list[str]) -> int:
    from ethosu.vela.vela import main  # imported by the server already; this only looks it up

    sys.argv = argv
    return int(main(argv[1:]) or 0)


if __name__ == "__main__":
    try:  # once, before any fork; a missing Vela is reported by each run that needs it
        import ethosu.vela.vela  # noqa: F401
    except ImportError:
        pass
    serve(sys.stdin, sys.stdout)
