"""Which protections a sandboxed process gets on this machine, and why any is missing.

The kernel's support is probed once per driver process (each protection tried alone in a
throwaway child of a small launcher process, ~0.1 s); the launcher then applies exactly the
chosen set or refuses to start, so what `Policy.active` records is what every worker got.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from solforge.harness.sandbox import launcher

OFF_VARIABLE = "SOLFORGE_SANDBOX"  # "off": no sandbox (debugging a worker only)


@dataclass(frozen=True)
class Policy:
    uid_switch: bool = False
    pid_namespace: bool = False
    user_namespace: bool = False
    landlock: bool = False
    seccomp: bool = False
    reveal: dict[str, list[str]] = field(default_factory=dict)  # see namespace.reveal
    active: dict[str, str] = field(default_factory=dict)  # protection -> what, or why not

    @property
    def enabled(self) -> bool:
        return bool(self.active) and not self.active.get("sandbox", "").startswith("off")


def policy_for(readable: tuple[str, ...], device_type: str = "cpu") -> Policy:
    """The policy for workers that must read `readable` (the problem's folder) and run on
    `device_type`."""
    if os.environ.get(OFF_VARIABLE, "").lower() == "off":
        return Policy(active={"sandbox": f"off ({OFF_VARIABLE}=off)"})
    return _policy(tuple(sorted(readable)), device_type)


@functools.cache
def _policy(readable: tuple[str, ...], device_type: str) -> Policy:
    found = probe()
    namespaces = found.get("pid_namespace") is True
    uid_ok, uid_note, reveal = _uid_decision(found, readable, can_mount=namespaces)
    # Legacy CUDA IPC handles (the GPU inputs' hand-over) cannot cross PID namespaces; as root
    # the private uid already marks every process of the worker, so the GPU goes without one.
    gpu_without = device_type == "cuda" and uid_ok
    pid_ok = namespaces and not gpu_without
    landlock_ok, seccomp_ok = found.get("landlock") is True, found.get("seccomp") is True
    active = {
        "uid": uid_note,
        "capabilities": "none (bounding set dropped)" if uid_ok else "none",
        "no_new_privs": "on",
        "pid_namespace": "on, own /proc" + (" (in a user namespace)" if not found["root"] else "")
        if pid_ok else ("off on the GPU (CUDA IPC does not cross PID namespaces)"
                        if gpu_without else f"unavailable ({found.get('pid_namespace')})")
        + (": every process of the private uid is killed" if uid_ok
           else ": the process group is killed"),
        "landlock": f"ABI {found['landlock_abi']}: writes only in the private folder"
        if landlock_ok else f"unavailable ({found.get('landlock')}): "
                            + ("file permissions" if uid_ok else "no write restriction"),
        "seccomp": "ptrace, process_vm_readv/writev, kcmp, pidfd_getfd denied" if seccomp_ok
        else f"unavailable ({found.get('seccomp')})",
        "interpreter": "python -I (no user site, no PYTHON* variables)",
        "driver_dumpable": "off while evaluating",
    }
    return Policy(uid_ok, pid_ok, pid_ok and not found["root"], landlock_ok, seccomp_ok, reveal,
                  active)


@functools.cache
def probe() -> dict:
    """What this kernel supports, from a launcher process (see enter.probe)."""
    argv = launcher.command(["--probe"])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        return json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as error:
        return {"root": os.geteuid() == 0, "landlock_abi": 0, "pid_namespace": str(error),
                "landlock": str(error), "seccomp": str(error), "uid": str(error)}


def _uid_decision(found: dict, readable: tuple[str, ...],
                  can_mount: bool) -> tuple[bool, str, dict[str, list[str]]]:
    """Switch uid only if the worker can still read all it needs: what sits in a folder other
    users cannot enter (/root, say) is revealed alone in the worker's mount namespace."""
    if found.get("uid") is not True:
        return False, f"the driver's ({found.get('uid')})", {}
    needed = [*readable, *launcher.source_paths(), sys.prefix, sys.base_prefix, sys.executable]
    reveal: dict[str, list[str]] = {}
    for path in (Path(p).resolve() for p in needed):
        if readable_by_others(path):
            continue
        closed = [p for p in reversed(path.parents) if not _enterable(p)]
        entry = path.relative_to(closed[0]).parts[0] if len(closed) == 1 else None
        if not can_mount or entry is None or not readable_by_others(path, below=closed[0]):
            return False, f"the driver's: {path} is not readable by other users", {}
        reveal.setdefault(str(closed[0]), []).append(entry)
    devices = [p for p in Path("/dev").glob("nvidia*") if p.is_char_device()
               and (p.stat().st_mode & 0o006) != 0o006]
    if devices:
        return False, f"the driver's: {devices[0]} is not open to other users", {}
    shown = "; " + ", ".join(f"only {', '.join(sorted(set(e)))} visible in {f}"
                             for f, e in reveal.items()) if reveal else ""
    return True, f"private per worker (no groups){shown}", \
        {f: sorted(set(e)) for f, e in reveal.items()}


def _enterable(folder: Path) -> bool:
    try:
        return bool(folder.stat().st_mode & stat.S_IXOTH)
    except OSError:
        return False


def readable_by_others(path: Path, below: Path | None = None) -> bool:
    """Whether a user with no relation to the owner can read `path` and reach it (from
    `below` on, when given)."""
    try:
        path = path.resolve()
        for parent in reversed(path.parents):
            inside = below is None or (parent != below and below in parent.parents)
            if inside and not parent.stat().st_mode & stat.S_IXOTH:
                return False
        mode = path.stat().st_mode
    except OSError:
        return False
    wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & wanted == wanted
