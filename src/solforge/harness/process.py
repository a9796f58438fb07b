"""Child processes the driver starts: a fresh interpreter each, in its own process group.

`start_new_session` puts the child and everything it forks in a new process group, so a
timeout kills all of them at once (a forked grandchild cannot keep a GPU or a pipe busy).
Given a `SandboxSpec`, the interpreter starts isolated (`python -I`) through the sandbox's
launcher, which applies the spec before the module runs (harness/sandbox).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from solforge.harness.baseline import KEY_ENV
from solforge.harness.output_log import OutputLog
from solforge.harness.sandbox import Sandbox, launcher, policy_for, protected_driver
from solforge.harness.sandbox.spec import SandboxSpec


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # None: killed at the timeout
    log: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def python_command(module: str, *args: str, sandbox: SandboxSpec | None = None) -> list[str]:
    if sandbox is not None:
        return launcher.command([sandbox.to_json(), module, *args])
    return [sys.executable, "-m", module, *args]


def python_env(base: dict[str, str]) -> dict[str, str]:
    """`base` with an absolute PYTHONPATH (a relative entry would break in the child's own
    folder), led by solforge's source folder when it runs from a checkout."""
    root = Path(__file__).resolve().parents[2]
    given = [str(Path(p).resolve()) for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [str(root), *given] if root.name == "src" else given
    return {**base, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def start(argv: Sequence[str], env: dict[str, str], cwd: Path,
          pass_fds: Sequence[int] = ()) -> subprocess.Popen:
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd=cwd, pass_fds=tuple(pass_fds),
                            start_new_session=True)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def run_captured(argv: Sequence[str], timeout_s: float, env: dict[str, str],
                 cwd: Path, kill: Callable[[subprocess.Popen], None] | None = None) -> Finished:
    """Run to completion or to the timeout; output kept bounded. `kill` ends whatever is left
    (default: the process group)."""
    process = start(argv, env, cwd)
    log = OutputLog(process.stdout)
    try:
        returncode: int | None = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        returncode = None
    (kill or kill_group)(process)
    log.wait(5)
    return Finished(returncode, log.text())


def run_module_sandboxed(module: str, args: Sequence[str], timeout_s: float,
                         env: dict[str, str], folder: Path, output: Path,
                         readable: Sequence[Path] = (), device_type: str = "cpu") -> Finished:
    """`python -m module args` to completion in a sandbox like a worker's (private uid and
    folder, PID namespace, Landlock, seccomp) that may read `folder` (and `readable`) and write
    only its own private folder and `output` (the solution's own build folder): the compile
    step, so nothing a compiler flag or a build script runs can touch the driver's other
    files; `device_type` "cuda" opens the GPU to it. Without a sandbox (SOLFORGE_SANDBOX=off),
    a plain run."""
    return _run_sandboxed(module, list(args), timeout_s, env, folder, output, readable,
                          device_type)


def run_program_sandboxed(argv: Sequence[str], timeout_s: float, env: dict[str, str],
                          folder: Path, output: Path, readable: Sequence[Path] = (),
                          device_type: str = "cpu") -> Finished:
    """A program (nvcc, say) run like `run_module_sandboxed`: restricted before it starts."""
    return _run_sandboxed(None, list(argv), timeout_s, env, folder, output, readable,
                          device_type)


def _run_sandboxed(module: str | None, args: list[str], timeout_s: float, env: dict[str, str],
                   folder: Path, output: Path, readable: Sequence[Path] = (),
                   device_type: str = "cpu") -> Finished:
    env = {k: v for k, v in env.items() if k != KEY_ENV}  # where the key is: not its business
    paths = dict.fromkeys(str(Path(p).resolve()) for p in (folder, *readable))
    policy = policy_for(tuple(paths), device_type)
    if not policy.enabled:
        plain = python_command(module, *args) if module else args
        return run_captured(plain, timeout_s, env, folder)
    sandbox = Sandbox(policy, shared=(output,))
    try:
        spec = sandbox.spec()
        argv = (python_command(module, *args, sandbox=spec) if module
                else launcher.command([spec.to_json(), "--exec", *args]))
        with protected_driver():
            return run_captured(argv, timeout_s, sandbox.env(env), Path(spec.cwd),
                                kill=sandbox.kill)
    finally:
        sandbox.remove()


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"
