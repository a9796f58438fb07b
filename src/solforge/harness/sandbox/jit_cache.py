"""A warm, trusted start for every sandbox's JIT caches.

Each sandbox's Triton and Inductor caches are private and fresh, so one candidate cannot plant
a compiled artifact that another (or the torch.compile baseline) loads. Fresh means cold: on
the CPU, Inductor's first compile probes the instruction sets by building small programs
(tens of seconds on a busy 2-core machine), Triton on the GPU builds its driver utilities.
Those artifacts do not depend on the candidate, so the driver makes them once per machine and
library versions, in a sandbox running only warm.py, keeps them in a folder of its own and
copies them into each new sandbox (~1 MB, milliseconds). Inductor's precompiled C++ headers
(under the warm-up's TMPDIR, ~150 MB) are kept too, and copied only into the sandboxes of
workers that run torch.compile (`headers`). Nothing a candidate wrote ever flows back into the
template.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from solforge.harness.sandbox import launcher
from solforge.harness.sandbox.box import Sandbox
from solforge.harness.sandbox.driver import kill_sandbox, protected_driver
from solforge.harness.sandbox.policy import Policy

WARM_TIMEOUT_S = 600.0
READY = "ready"
LAYOUT = "4"  # the template's folders: cache/, and tmp/ with Inductor's precompiled headers;
# 3: warm.py's kernels compiled with no local autotune records; 4: and triton_warm.py's kernel


def template_root() -> Path:
    """One template per library versions and install: Inductor's keys (its precompiled
    header's among them) name the paths of torch's headers, so two environments with the same
    versions on one machine would not find each other's artifacts."""
    versions = (f"{torch.__version__} {platform.python_version()} {_triton_version()} "
                f"{Path(torch.__file__).parent} layout {LAYOUT}")
    tag = hashlib.sha256(versions.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"solforge-jit-{os.getuid()}-{tag}"


_failed: set[str] = set()  # templates whose warm-up failed in this process (not retried)


def template(device_type: str, policy: Policy, env: dict[str, str]) -> Path | None:
    """The warm cache folder for `device_type`, made on first use; None if warming failed."""
    root = template_root()
    folder = root / flavour(device_type, env)
    if (folder / READY).is_file():
        return folder / "cache"
    if folder.name in _failed:
        return None
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one warm-up per machine, other drivers wait
        if not (folder / READY).is_file():
            _warm(folder, device_type, policy, env)
    if not (folder / READY).is_file():
        _failed.add(folder.name)
        return None
    return folder / "cache"


def flavour(device_type: str, env: dict[str, str]) -> str:
    """The template's folder name: on the CPU, Inductor's C++ kernels are specialised on the
    worker's thread count (torch.get_num_threads(), set by OMP_NUM_THREADS where given), and
    its graph cache keys name it, so a template warmed under one count is all misses under
    another (the local runner gives each of its slots cores // slots threads)."""
    if device_type != "cpu":
        return device_type
    threads = env.get("OMP_NUM_THREADS", "").strip()
    return f"cpu-threads-{threads}" if threads.isdigit() else "cpu"


def headers(cache: Path) -> Path | None:
    """The precompiled C++ headers beside a template's `cache` folder (None: there are none).

    Inductor keeps them under TMPDIR, not its cache folder, and on the CPU builds them (about
    150 MB, 5-10 s on a busy 2-core machine) the first time a process compiles: so in every
    fresh sandbox, the compile warm-up of a candidate that uses torch.compile included. They
    do not depend on the candidate, so the warm-up's are kept, and copied only into the
    sandboxes of workers that compile (most candidates never do)."""
    found = cache.parent / "tmp"
    return found if found.is_dir() and any(found.iterdir()) else None


def _warm(folder: Path, device_type: str, policy: Policy, env: dict[str, str]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    sandbox = Sandbox(policy)
    try:
        spec = sandbox.spec()
        argv = launcher.command([spec.to_json(), "solforge.harness.sandbox.warm",
                                 device_type])
        with protected_driver():
            process = subprocess.Popen(argv, env=sandbox.env(env), cwd=spec.cwd,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=WARM_TIMEOUT_S)
            kill_sandbox(process, sandbox.uid)
        if process.returncode == 0:
            shutil.copytree(sandbox.folder / "cache", folder / "cache", symlinks=True)
            shutil.copytree(sandbox.folder / "tmp", folder / "tmp", symlinks=True)
            _own(folder)
            (folder / READY).write_text("made by solforge.harness.sandbox.warm\n")
    finally:
        sandbox.remove()


def _own(folder: Path) -> None:
    """The template belongs to the driver (the warm-up ran under a private uid)."""
    for path in (folder, *folder.rglob("*")):
        with contextlib.suppress(OSError):
            os.chown(path, os.getuid(), os.getgid(), follow_symlinks=False)


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return "none"
