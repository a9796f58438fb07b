"""The entry point of a pre-spawned worker (pool.py): warm up, wait for the folder to work in,
then serve one candidate as an ordinary worker.

A module of its own, imported by nothing, so that `python -m` runs the only copy of it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from solforge.harness import startup
from solforge.harness.channel import FrameReader
from solforge.harness.pool import PLACE, PREWARM_ENV

_FOREVER = 1e9


def _prewarm() -> None:
    """What every worker does first anyway: Triton, the CUDA context, a first kernel, Triton's
    cache keys (jit_keys.py), its first launch (triton_warm.py) and the profiler's start (no
    candidate exists yet, so the guards' later snapshot sees this as the harness's own state;
    the worker's own warm-up then finds it all done)."""
    import torch

    from solforge.harness import jit_keys, triton_warm
    from solforge.measure.timing import time_iterations

    if os.environ.get(PREWARM_ENV) != "1":
        return
    with contextlib.suppress(ImportError):
        import triton  # noqa: F401
    startup.mark("triton")
    if torch.cuda.is_available():
        torch.randn(1 << 16, device="cuda").sum()
        startup.mark("cuda")
        jit_keys.compute()
        startup.mark("jit_keys")
        triton_warm.launch_once(torch.device("cuda"))
        startup.mark("triton_launch")
        time_iterations(lambda i: None, iterations=1, warmup=0, method="kernel")
        startup.mark("profiler")


def main(result_fd: int, command_fd: int, area_fd: int | None = None,
         link_fd: int | None = None) -> None:
    startup.mark("interpreter")  # this module's imports (the harness package's, torch's) included
    from solforge.harness import worker

    startup.mark("harness")
    with contextlib.suppress(Exception):  # the worker's own warm-up meets it again, and says
        _prewarm()
    frame = FrameReader(command_fd, b"").receive(time.monotonic() + _FOREVER)
    startup.mark("idle")  # waiting to be taken: before anyone waits for it, unless it was late
    if frame.kind != PLACE or not isinstance(frame.meta.get("cwd"), str):
        raise SystemExit(f"protocol: expected {PLACE!r} first, got {frame.kind!r}")
    os.chdir(frame.meta["cwd"])
    worker.main(result_fd, command_fd, area_fd, link_fd)


if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if p not in ("", str(Path.cwd()))]
    main(*map(int, sys.argv[1:5]))
