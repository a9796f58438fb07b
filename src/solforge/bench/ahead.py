"""A bench's Triton solutions compiled ahead on the CPU cores while earlier units are timed.

A solution's first calls on the GPU compile its Triton kernels for sm_90a (about a second a
kernel on the H200's host), and an autotuned kernel compiles every one of its configs before
the autotuner times them: a shipped GEMM with five configs and three specialisations is 15
compiles, one after another, with the GPU idle. The optimizer already compiles each candidate
ahead (forge/loop.py); this does it for a bench's solution units, every config of every
autotuned kernel for every workload the unit will time (forge/capture.compile_ahead, in a
sandboxed process), a few solutions at once, in the order their units were queued. The
solution's worker finds the kernels in its Triton cache (harness/sandbox/jit_ahead.py); a unit
that starts before they are ready compiles what it lacks, as before. Each solution's kernels
are removed once its unit has ended, and the rest when the bench ends.

Only for the local runner on a GPU: the kernels are kept in this machine's harness cache, where
the local runner's units look, and Triton's interpreter (the CPU) compiles nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from solforge.data.solution import Solution
from solforge.data.workload import Workload
from solforge.harness.sandbox import jit_ahead
from solforge.problem.problem import Problem

WORKERS = 4  # capture processes at once: one core each, of the GPU host's 16
# A capture past this is stopped: its solution compiles in its worker. It also bounds how long
# the bench's process waits at its exit for a capture still running (the threads are joined).
CAPTURE_LIMIT_S = 300.0


class KernelsAhead:
    """Compiles solutions ahead into `root` (the harness cache's jit_ahead.FOLDER)."""

    def __init__(self, root: Path, workers: int = WORKERS) -> None:
        self.root = root
        self._pool = ThreadPoolExecutor(workers, "bench-ahead")
        self._lock = threading.Lock()
        self._kept: dict[str, Solution] = {}  # by source digest, until its unit has ended
        self._ended: set[str] = set()  # units ended: what their capture keeps is dropped
        self._closed = False

    def submit(self, solution: Solution, problem: Problem,
               workloads: Sequence[Workload]) -> Future | None:
        """Queue the solution's kernels (Triton solutions only; None for any other)."""
        if "triton" not in solution.languages or not workloads:
            return None
        return self._pool.submit(self._compile, solution, problem, tuple(workloads))

    def ended(self, solution: Solution) -> None:
        """Its unit has ended: its kernels are no longer needed."""
        digest = jit_ahead.digest(solution)
        with self._lock:
            self._ended.add(digest)
            kept = self._kept.pop(digest, None)
        if kept is not None:
            jit_ahead.discard(self.root, kept)

    def close(self) -> None:
        """Start nothing more and remove every solution's kernels. A capture still running
        ends by itself and keeps nothing."""
        with self._lock:
            self._closed = True
            kept, self._kept = list(self._kept.values()), {}
        self._pool.shutdown(wait=False, cancel_futures=True)
        for solution in kept:
            jit_ahead.discard(self.root, solution)

    def _compile(self, solution: Solution, problem: Problem,
                 workloads: tuple[Workload, ...]) -> None:
        from solforge.forge.capture import compile_ahead  # the Triton compiler's side

        with self._lock:
            if self._closed or jit_ahead.digest(solution) in self._ended:
                return
        try:
            compile_ahead(solution, problem, workloads, lambda cache: self._keep(cache, solution),
                          timeout_s=CAPTURE_LIMIT_S, every_config=True)
        except Exception:  # any failure only leaves the kernels to the worker
            return

    def _keep(self, cache: Path, solution: Solution) -> None:
        digest = jit_ahead.digest(solution)
        with self._lock:
            if self._closed or digest in self._ended:
                return
            if jit_ahead.keep(cache, self.root, solution):
                self._kept[digest] = solution
