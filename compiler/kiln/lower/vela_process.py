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
is exec'd in the child. The server ends when its stdin closes, i.e. with the kiln process,
killing a run still going first.

The server is `python -m kiln.lower.vela_process`; of kiln's, this module imports only
kiln.isolation (kiln's end of a long-lived server, ServerProcess, is that module's).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import IO

from kiln.isolation import ServerProcess

_POLL_S = (0.001, 0.02)  # first and longest pause between checks on a running child


def installed_vela() -> Path:
    """The Vela script pip installs beside this interpreter (it may be absent)."""
    return Path(sys.executable).with_name("vela")


# ---- kiln's side


class VelaProcess:
    """kiln's end of the server (kiln.isolation.ServerProcess: started at the first run, shared
    by the process's threads, one run at a time, ended and waited for when the process exits)."""

    def __init__(self):
        self._server = ServerProcess([sys.executable, "-m", "kiln.lower.vela_process"], "kiln's Vela process")

    def run(self, argv: list[str], log: Path, timeout_s: float) -> int | None:
        """The return code of `argv` run with its output to `log`, or None when it outlived
        `timeout_s` and was killed. A server that ended (killed from outside) is started again
        once; an OSError when that one does not answer either."""
        job = json.dumps({"argv": argv, "cwd": os.getcwd(), "log": str(log), "timeout": timeout_s}) + "\n"

        def exchange(requests: IO[bytes], replies: IO[bytes]) -> dict | None:
            requests.write(job.encode())
            requests.flush()
            line = replies.readline()
            return json.loads(line) if line else None

        reply = self._server.ask(exchange)
        return None if reply.get("timeout") else int(reply["returncode"])


# ---- the server's side


def serve(requests: IO[str], replies: IO[str]) -> None:
    """Runs each job of `requests` in a forked child, one at a time, replying to each, until
    `requests` closes (then a running job is killed first)."""
    for line in requests:
        reply = _run(json.loads(line), requests)
        if reply is None:
            return
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def _run(job: dict, requests: IO[str]) -> dict | None:
    """The job's reply; None, the job killed, when `requests` became readable while it ran: kiln
    writes nothing until the reply, so that is the pipe closing (kiln exited or gave up)."""
    pid = os.fork()
    if pid == 0:
        _child(job)  # never returns
    deadline = time.monotonic() + float(job["timeout"])
    pause = _POLL_S[0]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        closed = bool(select.select([requests], [], [], pause)[0])
        if closed or time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None if closed else {"timeout": True}
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
