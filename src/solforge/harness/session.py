"""The driver's handle on one worker process: start it, talk to it, bound it, end it.

Every way the worker can stop answering becomes a `WorkerLost` with the status it deserves:
- past the deadline: TIMEOUT (the whole process group is killed);
- the process died (segfault, `os._exit`, an uncaught error) or closed the channel before a
  complete result: RUNTIME_ERROR, never PASSED;
- more than `log_limit_bytes` written to stdout/stderr: RUNTIME_ERROR (an output flood; the log
  keeps its head and tail);
- a frame that fails authentication: REWARD_HACK (something wrote on the result channel).
Given a `Sandbox`, the worker starts inside it (private uid and folder, PID namespace, Landlock,
seccomp: harness/sandbox) and closing kills every process it started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path

from solforge.data.trace import Status
from solforge.harness import protocol
from solforge.harness.area import TO_DRIVER, TO_WORKER, Area
from solforge.harness.channel import (
    ChannelClosed,
    ChannelForged,
    ChannelTimeout,
    Frame,
    FrameReader,
    FrameWriter,
)
from solforge.harness.output_log import OutputLog
from solforge.harness.phases import switch
from solforge.harness.pool import PLACE, Spawned, spawn
from solforge.harness.process import describe_exit
from solforge.harness.protocol import WorkerConfig

# The phase (phases.py) a workload is in after the driver sends / receives a frame kind.
_PHASE_AFTER_SENT = {protocol.START: "correctness", protocol.TIME: "timing",
                     protocol.SKIP: None}
_PHASE_AFTER_RECEIVED = {protocol.TIMING: "verify", protocol.WORKLOAD_DONE: None,
                         protocol.FAILURE: None}


class WorkerLost(Exception):
    def __init__(self, status: Status, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Limits:
    setup_timeout_s: float = 180.0  # start, import the candidate (compile at import included)
    workload_timeout_s: float = 180.0  # rounds, timing and re-checks of one workload
    log_limit_bytes: int = 8 << 20
    sandbox: bool = True  # run candidates and builds in harness/sandbox (off: debugging only)


class WorkerSession:
    def __init__(self, config: WorkerConfig, limits: Limits, env: dict[str, str],
                 cwd: Path, spawned: Spawned | None = None) -> None:
        """Drive `spawned` (a worker started ahead, in its sandbox if it has one: see pool.py)
        or a worker started now, unsandboxed."""
        self.limits = limits
        key = secrets.token_bytes(32)
        spawned = spawned or spawn(env)
        self.sandbox = spawned.sandbox
        self.spawned = spawned
        self.process = spawned.process
        self._fds = tuple(fd for fd in (spawned.result_fd, spawned.command_fd, spawned.area_fd)
                          if fd is not None)
        self.link = spawned.link  # the arenas' descriptors go to the worker here (vmm.py)
        cwd = spawned.cwd(cwd)
        self.log = OutputLog(self.process.stdout)
        inbox = outbox = None
        if spawned.area_fd is not None:  # the frames' tensors go through shared memory
            inbox, outbox = Area(spawned.area_fd, TO_DRIVER), Area(spawned.area_fd, TO_WORKER)
        self.reader = FrameReader(spawned.result_fd, key, area=inbox)
        self.writer = FrameWriter(spawned.command_fd, key, outbox)
        keyed = replace(config, key_hex=key.hex())
        unkeyed = FrameWriter(spawned.command_fd, b"")
        self._guarded(unkeyed.send, PLACE, {"cwd": str(cwd)})
        self._guarded(FrameWriter(spawned.command_fd, b"").send, protocol.CONFIG,
                      keyed.to_dict())

    def send(self, kind: str, meta: dict | None = None, values: list | tuple = ()) -> None:
        if kind in _PHASE_AFTER_SENT:
            switch(_PHASE_AFTER_SENT[kind])
        self._guarded(self.writer.send, kind, meta, values)

    def receive(self, deadline: float, max_payload: int, waiting_for: str) -> Frame:
        """The next frame; `waiting_for` names what a timeout interrupted."""
        self.reader.max_payload = max_payload
        try:
            frame = self.reader.receive(deadline, self._poll)
        except ChannelTimeout:
            raise WorkerLost(Status.TIMEOUT, f"time limit reached: {waiting_for}") from None
        except ChannelClosed as exc:
            raise self._lost(f"; {exc}: the result is incomplete") from None
        except ChannelForged as exc:
            raise WorkerLost(Status.REWARD_HACK, f"result channel tampered with: {exc}") from None
        self._check_flood()
        if frame.kind in _PHASE_AFTER_RECEIVED:
            switch(_PHASE_AFTER_RECEIVED[frame.kind])
        return frame

    def _poll(self) -> None:
        """Runs while no data is waiting: a dead or flooding worker ends the wait early."""
        self._check_flood()
        if self.process.poll() is not None:
            raise self._lost(" before sending a complete result")

    def _check_flood(self) -> None:
        if self.log.total_bytes > self.limits.log_limit_bytes:
            raise WorkerLost(Status.RUNTIME_ERROR,
                             f"wrote more than {self.limits.log_limit_bytes >> 20} MiB to "
                             "stdout/stderr (output flood)")

    def _lost(self, how: str) -> WorkerLost:
        """The worker ended: RUNTIME_ERROR, or REWARD_HACK where its own check found the
        harness altered (protocol.TAMPERED_EXIT, with what it found on stderr)."""
        returncode = self._returncode()
        if returncode == protocol.TAMPERED_EXIT:
            self.log.wait(1)
            found = [line for line in self.log.text().splitlines()
                     if line.startswith(protocol.TAMPERED_MARK)]
            what = found[-1].removeprefix(protocol.TAMPERED_MARK).strip() if found else "?"
            return WorkerLost(Status.REWARD_HACK, f"harness or timing state replaced or "
                                                  f"altered during the call, found by the "
                                                  f"worker's own check {what}"[:2000])
        return WorkerLost(Status.RUNTIME_ERROR,
                          f"the candidate's process {describe_exit(returncode)}{how}")

    def _returncode(self) -> int | None:
        try:
            return self.process.wait(timeout=1)
        except Exception:
            return None

    def _guarded(self, send, *args) -> None:
        try:
            send(*args)
        except (BrokenPipeError, OSError):
            raise self._lost(" (its command pipe is closed)") from None

    def close(self) -> None:
        """Kill the worker and all it started (nothing it could still send is wanted)."""
        switch(None)
        self.spawned.kill()
        self.log.wait(1)
        for area in (self.reader.area, self.writer.area):
            if area is not None:
                area.unpin()
        self.reader.area = self.writer.area = None  # unmapped once no value views it
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.link is not None:
            self.link.close()

    def deadline(self, seconds: float) -> float:
        return time.monotonic() + seconds
