"""A PID namespace (with its own /proc) for the sandboxed process and all it starts.

The launcher unshares, forks, and waits: its child is process 1 of the new namespace, and when
process 1 dies the kernel kills every process left in it, a daemon that called `setsid` or
double-forked included. A fresh /proc (in a private mount namespace) shows only the
namespace's processes, so the driver's /proc/<pid> is not even visible. Without root a user
namespace comes first (the unprivileged way to get the other two).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal

from solforge.harness.sandbox.libc import call, libc

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND = 2, 4, 8, 1 << 12
_MS_REC, _MS_PRIVATE, _MNT_DETACH = 1 << 14, 1 << 18, 2


def unshare(pid: bool, user: bool) -> None:
    """A private mount namespace, and new PID (for this process's next child) and user
    namespaces when asked."""
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS | (_CLONE_NEWPID if pid else 0) | (_CLONE_NEWUSER if user else 0)
    call("unshare", libc.unshare(flags))
    if user:  # the same ids inside: files keep their owners
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    call("mount(/, private)", libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None))


def fork_into_namespace(keep_fds: tuple[int, ...]) -> None:
    """Fork; the parent closes the child's pipes, waits and exits as the child did. Only the
    child (process 1 of the namespace, with its own /proc) returns."""
    child = os.fork()
    if child == 0:
        call("mount(/proc)", libc.mount(b"proc", b"/proc", b"proc",
                                        _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None))
        return
    for fd in keep_fds:
        os.close(fd)
    _, status = os.waitpid(child, 0)
    _exit_like(status)


def _exit_like(status: int) -> None:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler
            signal.signal(number, signal.SIG_DFL)
        # A worker starts with every signal blocked (harness/signals.py), this process too.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def reveal(hidden: dict[str, list[str]], staging: str) -> None:
    """In this mount namespace, cover each folder of `hidden` (one other users cannot enter,
    such as /root) with an empty tmpfs they can enter, holding only the listed entries bound
    back from the original. The driver's other files there are then not even visible."""
    for number, (folder, entries) in enumerate(sorted(hidden.items())):
        original = os.path.join(staging, f".reveal-{number}")
        os.mkdir(original, 0o700)
        call(f"mount(bind {folder})", libc.mount(folder.encode(), original.encode(), None,
                                                 _MS_BIND | _MS_REC, None))
        call(f"mount(tmpfs over {folder})", libc.mount(b"tmpfs", folder.encode(), b"tmpfs",
                                                       _MS_NOSUID | _MS_NODEV, b"mode=0755"))
        for entry in entries:
            source, target = os.path.join(original, entry), os.path.join(folder, entry)
            if os.path.isdir(source):
                os.mkdir(target)
            else:
                open(target, "w").close()
            call(f"mount(bind {target})", libc.mount(source.encode(), target.encode(), None,
                                                     _MS_BIND | _MS_REC, None))
        call("umount(staging)", libc.umount2(original.encode(), _MNT_DETACH))
        os.rmdir(original)
