"""The sandbox launcher: the first code the sandboxed interpreter runs, before any import of
the candidate's. It applies the spec it is given, in an order where each step still has the
rights it needs (namespaces, then the uid change, then no_new_privs, Landlock and seccomp),
and then runs the target module in the same interpreter. Any step that fails ends the process
with a message (fail closed): what the driver records as active is what the process got.

    python -I -u -c BOOT SPEC_JSON MODULE|SCRIPT.py ARG...    (see launcher.command)
    python -I -u -c BOOT SPEC_JSON --exec PROGRAM ARG...
    python -I -c BOOT --probe                       (what this kernel supports, as JSON)
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import signal
import sys

from solforge.harness.sandbox import identity, landlock, namespace, seccomp
from solforge.harness.sandbox.spec import SandboxSpec

EXIT_SANDBOX_FAILED = 121
EXEC = "--exec"
MAX_PROCESSES = 4096  # processes and threads of the private uid


def main(argv: list[str]) -> None:
    if argv[0] == "--probe":
        print(json.dumps(probe()))
        return
    spec = SandboxSpec.from_json(argv[0])
    try:
        apply(spec)
    except OSError as error:
        print(f"sandbox: could not apply {error}", file=sys.stderr, flush=True)
        os._exit(EXIT_SANDBOX_FAILED)
    sys.argv = list(argv[1:])
    if argv[1] == EXEC:  # a program (a compiler): it keeps every restriction through exec
        os.execvp(argv[2], argv[2:])
    if argv[1].endswith(".py"):  # a script (the tests' attack probes)
        runpy.run_path(argv[1], run_name="__main__")
    else:
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


def apply(spec: SandboxSpec) -> None:
    if spec.pid_namespace or spec.reveal:
        namespace.unshare(pid=spec.pid_namespace, user=spec.user_namespace)
    if spec.pid_namespace:
        namespace.fork_into_namespace(spec.keep_fds)
    namespace.reveal(spec.reveal, staging=os.path.dirname(spec.cwd))
    if spec.uid is not None:
        identity.drop_to(spec.uid)
    identity.clear_capabilities()
    identity.no_new_privs()
    if spec.pid_namespace:
        identity.die_with_parent(signal.SIGKILL)
    if spec.landlock:
        landlock.restrict_writes(spec.writable)
    if spec.seccomp:
        seccomp.deny_cross_process_calls()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if spec.uid is not None:  # per-uid, so only with a uid of its own: no fork bomb
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))
    os.chdir(spec.cwd)


def probe() -> dict[str, str | bool | int]:
    """Each protection tried alone in a throwaway child: {name: True, or why not}."""
    root = os.geteuid() == 0
    found: dict[str, str | bool | int] = {"root": root, "landlock_abi": landlock.abi_version()}
    trials = {
        "pid_namespace": lambda: _namespace_trial(not root),
        "seccomp": lambda: (identity.no_new_privs(), seccomp.deny_cross_process_calls()),
        "landlock": lambda: (identity.no_new_privs(), landlock.restrict_writes(["/tmp"])),
        "uid": lambda: identity.drop_to(identity.draw_uid()) if root else _not_root(),
    }
    for name, trial in trials.items():
        found[name] = _in_child(trial)
    return found


def _namespace_trial(with_user_namespace: bool) -> None:
    namespace.unshare(pid=True, user=with_user_namespace)
    namespace.fork_into_namespace(())
    if os.getpid() != 1:
        raise OSError("not process 1 in the new PID namespace")
    os._exit(0)


def _not_root() -> None:
    raise OSError("not root: the worker keeps the driver's uid")


def _in_child(trial) -> str | bool:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        try:
            trial()
            message = b""
        except OSError as error:
            message = str(error).encode() or b"failed"
        os.write(write, message)
        os._exit(0 if not message else 1)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(child, 0)
    ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and not message
    return True if ok else (message or f"exit status {status}")
