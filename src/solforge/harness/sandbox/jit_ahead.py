"""Triton kernels compiled ahead for one candidate, found by its worker as cache hits.

On the GPU the first call of a Triton candidate spends about a second per kernel in Triton's
compiler, on the critical path of the GPU. So the optimizer compiles each candidate's kernels on
the CPU cores while earlier candidates are being timed (forge/capture.compile_ahead: in a
sandbox of its own, for the GPU's architecture, on meta tensors shaped as every workload's
arguments, specialised as Triton's JIT specialises them). Kept here, that Triton cache is copied
into the candidate's own worker sandbox before its worker starts, so Triton's JIT finds its
kernels on disk instead of compiling them (a key Triton computes exactly; a kernel specialised
otherwise is compiled as before).

What is kept was written by the candidate's own code, in the capture's sandbox: it goes only into
the sandbox of a candidate with the same sources (the folder is named by their hash), which could
have written the same files into its own cache, and never into a baseline's. Only regular files
are kept, within a size bound; each candidate's folder is removed once it is judged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from solforge.data.solution import Solution

FOLDER = "triton-ahead"  # under the harness cache folder (EvalConfig.cache_dir)
MAX_BYTES = 256 * 2**20  # a candidate's kept cache; beyond it nothing is kept
MAX_FILES = 4096


def digest(solution: Solution) -> str:
    """The hash of the solution's sources (paths and contents): what its kernels depend on."""
    hasher = hashlib.sha256()
    for source in sorted(solution.sources, key=lambda s: s.path):
        for part in (source.path, source.content):
            data = part.encode()
            hasher.update(len(data).to_bytes(8, "little") + data)
    return hasher.hexdigest()[:32]


def folder(root: Path, solution: Solution) -> Path:
    """Where the solution's kernels are kept under `root` (the harness cache's FOLDER)."""
    return root / digest(solution)


def keep(cache: Path, root: Path, solution: Solution) -> bool:
    """Keep the regular files of the Triton cache folder `cache` as the solution's (replacing
    what was kept before); False, keeping nothing, when there are none or too many."""
    files = regular_files(cache)
    if not files or len(files) > MAX_FILES or sum(p.stat().st_size for p in files) > MAX_BYTES:
        return False
    root.mkdir(parents=True, exist_ok=True)
    draft = Path(tempfile.mkdtemp(prefix=".draft-", dir=root))
    try:
        for path in files:
            target = draft / path.relative_to(cache)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target, follow_symlinks=False)
        final = folder(root, solution)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(draft, final)  # a worker's sandbox copies all of it or none of it
    except OSError:  # the same sources kept at the same moment by another run: theirs stays
        shutil.rmtree(draft, ignore_errors=True)
        return False
    return True


def discard(root: Path, solution: Solution) -> None:
    shutil.rmtree(folder(root, solution), ignore_errors=True)


def regular_files(top: Path) -> list[Path]:
    """The regular files under `top`, never following a link (links, devices, sockets and
    pipes are left out)."""
    if not top.is_dir() or top.is_symlink():
        return []
    found = []
    for where, folders, names in os.walk(top, followlinks=False):
        folders[:] = [name for name in folders if not Path(where, name).is_symlink()]
        found += [Path(where, name) for name in names
                  if not Path(where, name).is_symlink() and Path(where, name).is_file()]
    return sorted(found)
