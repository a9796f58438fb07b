"""Triton's per-process cache keys, computed in a worker before its candidate exists.

On its first lookup of a kernel in its cache, Triton's JIT computes two keys that it then keeps
for the life of the process: the installed Triton's (a SHA-256 over its compiler's sources and
its libtriton, 415 MB in Triton 3.6: 0.31 s on an idle core of the 2-core CI machine) and the
GPU backend's (the version that `ptxas --version` prints, a subprocess). A worker serves one
candidate and is then killed, so every candidate paid both inside its first call, under the
GPU's shared lock (device_lock.py), even when its kernels were compiled ahead and the lookup
hit. Computed while a pre-spawned worker waits for its candidate, they are off that path.

Nothing here decides a verdict: the keys only name files in the worker's own Triton cache.
"""

from __future__ import annotations

from typing import Any


def compute(target: Any = None) -> bool:
    """Compute and keep Triton's key and the backend's for `target` (a `GPUTarget`; None: the
    current GPU's, which needs CUDA). False when Triton is not installed or a key cannot be
    computed here (a missing `ptxas`, say): the JIT then computes it, or fails, as it would."""
    try:
        from triton.compiler import make_backend
        from triton.runtime import driver
        from triton.runtime.cache import triton_key

        triton_key()
        chosen = target if target is not None else driver.active.get_current_target()
        backend = make_backend(chosen)
        backend.hash()
        backend.parse_options({}).hash()  # hashes the bundled libdevice once
    except Exception:  # a head start only
        return False
    return True
