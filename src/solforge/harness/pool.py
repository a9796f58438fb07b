"""Single-use workers started ahead of need.

A worker's start (a fresh interpreter, `import torch`, Triton, the CUDA context) costs seconds
and happens before it knows anything about its candidate. So the driver starts it early: a
pre-spawned worker imports everything, initialises CUDA, and then blocks on its command pipe.
When a candidate needs a worker it takes a waiting one, sends it the folder to work in and its
CONFIG, and from then on it is an ordinary worker: it serves that one candidate and is killed
with its process group. A worker is never handed back, so isolation is what it was with a fresh
process per candidate; only the waiting happens earlier.

Workers are keyed by their environment: a waiting worker is used only by a run with exactly the
environment it was started with (CUDA_VISIBLE_DEVICES, TRITON_INTERPRET, PYTHONPATH...).
`SOLFORGE_WORKER_POOL=0` turns pre-spawning off (every take starts a fresh process, the same
entry point). Waiting workers are killed when the driver exits; a driver killed outright closes
their command pipes, and a worker whose pipe closes before its CONFIG exits.

    python -m solforge.harness.prespawned RESULT_FD COMMAND_FD    (the worker's entry point)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from solforge.harness import area, signals, vmm
from solforge.harness.process import kill_group, python_command, start
from solforge.harness.sandbox import Sandbox

PLACE = "place"  # the unauthenticated first frame: the folder the worker works in
SandboxMaker = Callable[[], Sandbox]
PREWARM_ENV = "SOLFORGE_WORKER_PREWARM"  # "1": initialise CUDA and import Triton while waiting


@dataclass(frozen=True)
class Spawned:
    """A started worker process, the driver's ends of its two pipes and its shared area."""

    process: subprocess.Popen
    result_fd: int  # the driver reads results here
    command_fd: int  # the driver writes commands here
    started: float  # time.monotonic() at spawn
    sandbox: Sandbox | None = None  # the sandbox it runs in, if any
    area_fd: int | None = None  # the frames' shared memory (area.py)
    link: socket.socket | None = None  # where the driver sends arenas' descriptors (vmm.py)

    def cwd(self, default: Path) -> Path:
        """Where it works: its sandbox's private home, else `default`."""
        return Path(self.sandbox.spec().cwd) if self.sandbox is not None else default

    def kill(self) -> None:
        if self.sandbox is not None:
            self.sandbox.kill(self.process)
        else:
            kill_group(self.process)

    def discard(self) -> None:
        self.kill()
        if self.sandbox is not None:
            self.sandbox.remove()
        for fd in (self.result_fd, self.command_fd, self.area_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self.link is not None:
            self.link.close()


def spawn(env: dict[str, str], make_sandbox: SandboxMaker | None = None) -> Spawned:
    """Start one worker process; it imports the harness and waits for its PLACE and CONFIG.
    With `make_sandbox`, it starts inside a fresh sandbox made now (its private folder, uid,
    Landlock, seccomp: nothing of them depends on the candidate, whose files the driver copies
    in later); without, in the root folder, since nothing it does before PLACE needs one."""
    result_read, result_write = os.pipe()
    command_read, command_write = os.pipe()
    area_fd = area.create()
    link, worker_link = vmm.socket_pair()
    passed = (result_write, command_read, area_fd, worker_link.fileno())
    sandbox = make_sandbox() if make_sandbox is not None else None
    spec = sandbox.spec(keep_fds=passed) if sandbox is not None else None
    argv = python_command("solforge.harness.prespawned", *map(str, passed), sandbox=spec)
    env, cwd = {**env, PREWARM_ENV: "1"}, Path("/")
    if sandbox is not None:
        env, cwd = sandbox.env(env), Path(spec.cwd)
    with signals.children_start_blocked():  # the worker's every thread inherits the mask
        process = start(argv, env, cwd, pass_fds=passed)
    os.close(result_write)
    os.close(command_read)
    worker_link.close()
    return Spawned(process, result_read, command_write, time.monotonic(), sandbox, area_fd, link)


def enabled() -> bool:
    return os.environ.get("SOLFORGE_WORKER_POOL", "1") != "0"


class WorkerPool:
    """Waiting workers per environment; each is taken once."""

    def __init__(self) -> None:
        self._waiting: dict[tuple, list[Spawned]] = {}
        self._lock = threading.Lock()

    def prepare(self, env: dict[str, str], count: int = 1,
                make_sandbox: SandboxMaker | None = None, kind: object = None) -> None:
        """Have `count` workers waiting for `env` and sandbox `kind` (start the missing ones
        now, each in a sandbox of its own from `make_sandbox`)."""
        if not enabled():
            return
        key = _key(env, kind)
        with self._lock:
            waiting = self._waiting.setdefault(key, [])
            waiting[:] = [s for s in waiting if s.process.poll() is None]
            while len(waiting) < count:
                waiting.append(spawn(env, make_sandbox))

    def take(self, env: dict[str, str], make_sandbox: SandboxMaker | None = None,
             kind: object = None) -> Spawned:
        """A waiting worker for `env` and sandbox `kind` that is still alive, or a freshly
        started one."""
        with self._lock:
            waiting = self._waiting.get(_key(env, kind), [])
            while waiting:
                spawned = waiting.pop(0)
                if spawned.process.poll() is None:
                    return spawned
                spawned.discard()
        return spawn(env, make_sandbox)

    def waiting(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._waiting.values())

    def close(self) -> None:
        """Kill every waiting worker."""
        with self._lock:
            for waiting in self._waiting.values():
                for spawned in waiting:
                    spawned.discard()
            self._waiting.clear()


# Set in the driver's own environment as a side effect (Inductor writes its default cache
# folder there the first time it runs, for instance during the analysis of T_SOL), to what a
# worker of the same uid uses anyway; a sandboxed worker gets its own. A worker started
# before it was set serves a run started after.
_SIDE_EFFECTS = frozenset({"TORCHINDUCTOR_CACHE_DIR"})


def _key(env: dict[str, str], kind: object) -> tuple:
    return (tuple(sorted((k, v) for k, v in env.items() if k not in _SIDE_EFFECTS)),
            repr(kind))


_SHARED: WorkerPool | None = None


def shared_pool() -> WorkerPool:
    """This process's pool (closed at exit)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = WorkerPool()
        atexit.register(_SHARED.close)
    return _SHARED
