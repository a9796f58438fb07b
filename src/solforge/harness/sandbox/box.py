"""One sandbox: a private folder and the spec for one sandboxed process (a worker or a build).

The private folder (fresh, owned by the sandbox's uid, under the system's temp folder) is the
process's working directory, HOME, TMPDIR and the home of every cache a compiler or JIT writes
(Triton, Inductor, torch extensions, CUDA's compute cache); nothing else is writable to it.
The solution's files are copied in, so the worker never runs inside the driver's cache.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from solforge.harness.sandbox.driver import kill_sandbox
from solforge.harness.sandbox.identity import draw_uid
from solforge.harness.sandbox.jit_ahead import regular_files
from solforge.harness.sandbox.policy import Policy
from solforge.harness.sandbox.spec import SandboxSpec

_HIDDEN_VARIABLES = ("SOLFORGE_CACHE",)  # where the driver keeps trusted state


class Sandbox:
    """`shared`: folders outside the private one the process may write too (a build's output
    folder), its own while it runs and handed back to the driver by `remove`."""

    def __init__(self, policy: Policy, shared: tuple[Path, ...] = (),
                 warm_cache: Path | None = None) -> None:
        self.policy = policy
        self.shared = shared
        self.uid = draw_uid() if policy.uid_switch else None
        self.folder = Path(tempfile.mkdtemp(prefix="solforge-sandbox-"))
        for name in ("home", "tmp"):
            (self.folder / name).mkdir()
        if warm_cache is not None:  # a copy of the driver's trusted template (jit_cache.py)
            shutil.copytree(warm_cache, self.folder / "cache", symlinks=True)
        else:
            (self.folder / "cache").mkdir()
        self._give(self.folder, self.uid)
        for folder in shared:
            folder.mkdir(parents=True, exist_ok=True)
            self._give(folder, self.uid)

    def spec(self, keep_fds: tuple[int, ...] = ()) -> SandboxSpec:
        policy = self.policy
        writable = (str(self.folder), *map(str, self.shared))
        return SandboxSpec(cwd=str(self.folder / "home"), writable=writable,
                           uid=self.uid, pid_namespace=policy.pid_namespace,
                           user_namespace=policy.user_namespace, landlock=policy.landlock,
                           seccomp=policy.seccomp, keep_fds=keep_fds, reveal=policy.reveal)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        home, tmp, cache = (str(self.folder / n) for n in ("home", "tmp", "cache"))
        env = {k: v for k, v in base.items() if k not in _HIDDEN_VARIABLES}
        env.update(HOME=home, PWD=home, TMPDIR=tmp, TEMP=tmp, TMP=tmp, XDG_CACHE_HOME=cache,
                   USER="solforge-sandbox", LOGNAME="solforge-sandbox",
                   TRITON_HOME=home, TRITON_CACHE_DIR=f"{cache}/triton",
                   TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor",
                   TORCH_EXTENSIONS_DIR=f"{cache}/torch_extensions",
                   CUDA_CACHE_PATH=f"{cache}/nv",
                   # FlashInfer opens a log in its workspace when imported and JIT-builds there:
                   # its own, as for Triton. Its kernels come ahead of time (flashinfer-jit-cache).
                   FLASHINFER_WORKSPACE_BASE=home)
        return env

    def copy_in(self, source: Path, files: list[Path]) -> Path:
        """Copy `files` (paths under `source`) into the private folder; the copy's root."""
        target = self.folder / "solution"
        for path in files:
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
        self._give(target, self.uid)
        return target

    def copy_in_triton(self, kernels: Path | None) -> None:
        """Merge a candidate's Triton kernels compiled ahead (jit_ahead.py) into this
        sandbox's Triton cache, where its JIT looks them up: regular files only."""
        self._merge_cache(kernels, "triton")

    def copy_in_compiled(self, compiled: Path | None) -> None:
        """Merge the torch.compile baseline's graphs compiled ahead (compile_ahead.py: their
        `inductor/` and `triton/` caches) into this sandbox's: regular files only."""
        if compiled is not None:
            for name in ("inductor", "triton"):
                self._merge_cache(compiled / name, name)

    def _merge_cache(self, source: Path | None, name: str) -> None:
        if source is None or not source.is_dir():
            return
        cache = self.folder / "cache" / name
        for path in regular_files(source):
            target = cache / path.relative_to(source)
            with contextlib.suppress(OSError):  # removed meanwhile: compiled again there
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target, follow_symlinks=False)
        if cache.is_dir():
            self._give(cache, self.uid)

    def copy_in_headers(self, headers: Path | None) -> None:
        """Copy the template's precompiled C++ headers (jit_cache.headers) into this sandbox's
        TMPDIR, where Inductor looks for them: a copy of its own, as for the caches."""
        if headers is None:
            return
        shutil.copytree(headers, self.folder / "tmp", symlinks=True, dirs_exist_ok=True)
        self._give(self.folder / "tmp", self.uid)

    def kill(self, process: subprocess.Popen) -> None:
        kill_sandbox(process, self.uid)

    def remove(self) -> None:
        """Delete the private folder; the shared folders belong to the driver again (so no
        later sandbox, with its own uid, can change what this one wrote)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        for folder in self.shared:
            self._give(folder, os.getuid() if self.uid is not None else None)

    def _give(self, root: Path, uid: int | None) -> None:
        if uid is None:
            return
        for path in (root, *root.rglob("*")):
            with contextlib.suppress(OSError):
                os.chown(path, uid, uid, follow_symlinks=False)
