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
from solforge.harness.channel import (
    ChannelClosed,
    ChannelForged,
    ChannelTimeout,
    Frame,
    FrameReader,
    FrameWriter,
)
from solforge.harness.output_log import OutputLog
from solforge.harness.process import describe_exit, kill_group, python_command, start
from solforge.harness.protocol import WorkerConfig
from solforge.harness.sandbox import Sandbox


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
                 cwd: Path, sandbox: Sandbox | None = None) -> None:
        self.limits = limits
        self.sandbox = sandbox
        key = secrets.token_bytes(32)
        result_read, result_write = os.pipe()
        command_read, command_write = os.pipe()
        passed = (result_write, command_read)
        spec = sandbox.spec(keep_fds=passed) if sandbox else None
        argv = python_command("solforge.harness.worker", *map(str, passed), sandbox=spec)
        if sandbox is not None:
            env, cwd = sandbox.env(env), Path(spec.cwd)
        self.process = start(argv, env, cwd, pass_fds=passed)
        os.close(result_write)
        os.close(command_read)
        self._fds = (result_read, command_write)
        self.log = OutputLog(self.process.stdout)
        self.reader = FrameReader(result_read, key)
        self.writer = FrameWriter(command_write, key)
        keyed = replace(config, key_hex=key.hex())
        self._guarded(FrameWriter(command_write, b"").send, protocol.CONFIG, keyed.to_dict())

    def send(self, kind: str, meta: dict | None = None) -> None:
        self._guarded(self.writer.send, kind, meta)

    def receive(self, deadline: float, max_payload: int, waiting_for: str) -> Frame:
        """The next frame; `waiting_for` names what a timeout interrupted."""
        self.reader.max_payload = max_payload
        try:
            frame = self.reader.receive(deadline, self._poll)
        except ChannelTimeout:
            raise WorkerLost(Status.TIMEOUT, f"time limit reached: {waiting_for}") from None
        except ChannelClosed as exc:
            raise WorkerLost(Status.RUNTIME_ERROR, f"{self._exit_note()}; {exc}: the result "
                                                   "is incomplete") from None
        except ChannelForged as exc:
            raise WorkerLost(Status.REWARD_HACK, f"result channel tampered with: {exc}") from None
        self._check_flood()
        return frame

    def _poll(self) -> None:
        """Runs while no data is waiting: a dead or flooding worker ends the wait early."""
        self._check_flood()
        if self.process.poll() is not None:
            raise WorkerLost(Status.RUNTIME_ERROR, f"{self._exit_note()} before sending a "
                                                   "complete result")

    def _check_flood(self) -> None:
        if self.log.total_bytes > self.limits.log_limit_bytes:
            raise WorkerLost(Status.RUNTIME_ERROR,
                             f"wrote more than {self.limits.log_limit_bytes >> 20} MiB to "
                             "stdout/stderr (output flood)")

    def _exit_note(self) -> str:
        try:
            returncode = self.process.wait(timeout=1)
        except Exception:
            returncode = None
        return f"the candidate's process {describe_exit(returncode)}"

    def _guarded(self, send, *args) -> None:
        try:
            send(*args)
        except (BrokenPipeError, OSError):
            raise WorkerLost(Status.RUNTIME_ERROR,
                             f"{self._exit_note()} (its command pipe is closed)") from None

    def close(self) -> None:
        """Kill the worker and all it started (nothing it could still send is wanted)."""
        if self.sandbox is not None:
            self.sandbox.kill(self.process)
        else:
            kill_group(self.process)
        self.log.wait(1)
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def deadline(self, seconds: float) -> float:
        return time.monotonic() + seconds
