"""The driver's side: not dumpable while it evaluates, a subreaper, and the kill that leaves
no process of a sandbox alive.

Non-dumpable, the driver's /proc/<pid>/{mem,fd,environ} belong to root and ptrace is refused
to anyone without CAP_SYS_PTRACE, even a process of its own uid. As a child subreaper, a
worker's orphans re-parent to the driver (not init), so none escapes into the system.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from solforge.harness.sandbox.libc import libc

_PR_SET_DUMPABLE, _PR_GET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 3, 36
_lock = threading.Lock()
_holders = 0
_was_dumpable = 1


@contextlib.contextmanager
def protected_driver() -> Iterator[None]:
    """Not dumpable (and a subreaper) for as long as any evaluation in this process runs."""
    global _holders, _was_dumpable
    with _lock:
        if _holders == 0:
            _was_dumpable = libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
            libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # re-asserted: someone may clear it
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_dumpable > 0:
                libc.prctl(_PR_SET_DUMPABLE, _was_dumpable, 0, 0, 0)


def dumpable() -> bool:
    return libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 1


def kill_sandbox(process: subprocess.Popen, uid: int | None) -> None:
    """SIGKILL everything the sandbox started: process 1 of its PID namespace (the kernel then
    kills the rest), every process of its private uid, the launcher's process group; reap."""
    victims = children(process.pid)
    if uid is not None:
        victims += processes_of(uid)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    if uid is not None:
        _kill_until_gone(uid)
    for pid in victims:  # orphans re-parented to this subreaper
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _kill_until_gone(uid: int, seconds: float = 5.0) -> None:
    """A process of the uid may fork while being killed: repeat until none is left."""
    end = time.monotonic() + seconds
    while (left := processes_of(uid)) and time.monotonic() < end:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def processes_of(uid: int) -> list[int]:
    """Live (not zombie) processes whose real uid is `uid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(entry.name))
    return found
