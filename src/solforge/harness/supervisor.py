"""Run one role (the candidate, or the reference as a baseline) over workloads in worker
processes, restarting the worker after it crashes or hangs.

A worker that dies, hangs, floods its output or stops answering loses the workload it was on
(RUNTIME_ERROR or TIMEOUT) and a fresh worker takes the remaining ones, up to `max_restarts`
times; after that every remaining workload gets the last failure. A failure to load the
solution, or a guard tripped at import, is final for every workload. A candidate caught
cheating is disqualified: every workload not yet evaluated is a REWARD_HACK too. Each worker
runs in a fresh sandbox (harness/sandbox) holding a copy of the solution's files, never in the
driver's cache.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from solforge.data.solution import Solution
from solforge.data.trace import Status, parse_status
from solforge.data.workload import Workload
from solforge.harness import device_lock, protocol
from solforge.harness.baseline import KEY_ENV
from solforge.harness.build import Build
from solforge.harness.judge import Judge, Plan, WorkloadResult
from solforge.harness.oracle import ReferenceOracle
from solforge.harness.phases import phase, record
from solforge.harness.pool import SandboxMaker, shared_pool
from solforge.harness.process import python_env
from solforge.harness.protocol import WorkerConfig
from solforge.harness.sandbox import (
    Policy,
    Sandbox,
    jit_ahead,
    jit_cache,
    policy_for,
    protected_driver,
)
from solforge.harness.session import Limits, WorkerLost, WorkerSession
from solforge.harness.startup import waited_steps

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RoleRun:
    results: dict[str, WorkloadResult]
    log: str  # what the workers printed (bounded)


@dataclass(frozen=True)
class Supervisor:
    """Everything needed to start workers for one problem on one device."""

    problem_dir: Path
    device: torch.device
    oracle: ReferenceOracle
    timing_method: str
    limits: Limits
    max_restarts: int
    workdir: Path  # the workers' working directory when there are no sources
    ahead_root: Path | None = None  # candidates' Triton kernels compiled ahead (jit_ahead.py)

    def run(self, role: str, solution: Solution | None, build: Build | None, plan: Plan,
            workloads: list[Workload], report: Progress,
            compiled: Path | None = None) -> RoleRun:
        """Run `role` over `workloads`; `solution` is the candidate's (None for a baseline);
        `compiled`: the torch.compile baseline's graphs compiled ahead (compile_ahead.py)."""
        pending = list(workloads)
        results: dict[str, WorkloadResult] = {}
        logs: list[str] = []
        restarts = 0
        policy = self.sandbox_policy()
        warm = self._warm_cache(policy)
        while pending:
            env = self._env()
            spawned = shared_pool().take(env, _sandbox_maker(policy, warm), policy)
            sandbox = spawned.sandbox
            try:
                if sandbox is not None and warm is not None and _compiles(role, solution):
                    sandbox.copy_in_headers(jit_cache.headers(warm))
                if sandbox is not None and role == protocol.CANDIDATE:
                    kernels = self._ahead(role, solution)
                    with phase(ahead_phase(kernels)):
                        sandbox.copy_in_triton(kernels)
                    if role == protocol.REFERENCE_COMPILE:
                        with phase("compiled_ahead"):
                            sandbox.copy_in_compiled(compiled)
                with protected_driver():
                    session = WorkerSession(
                        self._config(role, solution, _placed(build, sandbox), plan),
                        self.limits, env, build.folder if build else self.workdir, spawned)
                    try:
                        ended = self._drive(session, role, plan, pending, results,
                                            report)
                    finally:
                        with phase("worker_close"):
                            session.close()
                        logs.append(session.log.text())
            finally:
                if sandbox is not None:
                    sandbox.remove()
            if ended is None:
                break
            restarts += 1
            if restarts > self.max_restarts:
                _finish_all(pending, results, ended.status,
                            f"not run: the process failed {restarts} times "
                            f"(last: {ended.message})")
                break
            report(f"restarting the worker ({restarts}/{self.max_restarts})")
        return RoleRun(results, "\n".join(logs))

    def sandbox_policy(self) -> Policy:
        """What isolates this runner's workers (recorded in each trace's environment)."""
        if not self.limits.sandbox:
            return Policy(active={"sandbox": "off (Limits.sandbox=False)"})
        return policy_for((str(self.problem_dir.resolve()),), self.device.type)

    def _warm_cache(self, policy: Policy) -> Path | None:
        """The trusted JIT-cache template every sandbox starts from (made once per machine)."""
        if not policy.enabled:
            return None
        return jit_cache.template(self.device.type, policy, self._env())

    def _ahead(self, role: str, solution: Solution | None) -> Path | None:
        """The candidate's own Triton kernels compiled ahead, if any (never a baseline's)."""
        if role != protocol.CANDIDATE or solution is None or self.ahead_root is None:
            return None
        return jit_ahead.folder(self.ahead_root, solution)

    def _drive(self, session: WorkerSession, role: str, plan: Plan,
               pending: list[Workload], results: dict[str, WorkloadResult],
               report: Progress) -> WorkloadResult | None:
        """Evaluate workloads until none are left (None) or the worker is gone (its result)."""
        try:
            with phase("worker_wait"):
                _await_ready(session, self.limits.setup_timeout_s)
        except WorkerLost as lost:
            _finish_all(pending, results, lost.status, lost.message)
            return None
        candidate = role == protocol.CANDIDATE
        judge = Judge(session, TimedOracle(self.oracle), plan, self.limits.workload_timeout_s,
                      seeds_to_worker=not candidate, candidate=candidate)
        try:
            return self._judge_all(judge, pending, results, report)
        finally:
            judge.close()

    def _judge_all(self, judge: Judge, pending: list[Workload],
                   results: dict[str, WorkloadResult], report: Progress) -> WorkloadResult | None:
        while pending:
            workload = pending.pop(0)
            report(f"{workload.uuid[:8]} running")
            try:
                result = judge.judge(workload)
            except WorkerLost as lost:
                result = WorkloadResult(workload.uuid, lost.status, lost.message, fatal=True)
            results[workload.uuid] = result
            if result.status is Status.REWARD_HACK:
                _finish_all(pending, results, Status.REWARD_HACK,
                            f"not evaluated: the solution was caught cheating on workload "
                            f"{workload.uuid}: {result.message}")
                return None
            if result.fatal and pending:
                return result
        return None

    def _config(self, role: str, solution: Solution | None, build: Build | None,
                plan: Plan) -> WorkerConfig:
        candidate = role == protocol.CANDIDATE
        preload = solution.preload_modules() if candidate else ()
        return WorkerConfig(
            key_hex="", role=role, problem_dir=str(self.problem_dir.resolve()),
            device=str(self.device), source_dir=str(build.folder) if build else None,
            entry_file=solution.entry_file if candidate else None,
            entry_function=solution.entry_function if candidate else None,
            library=str(build.library) if build and build.library else None,
            module_name=build.module_name if build else None,
            destination_passing_style=candidate and solution.destination_passing_style,
            preload=preload, timing_method=self.timing_method, warmup=plan.warmup,
            iterations=plan.iterations, min_iterations=plan.min_iterations, flush_bytes=None,
            retain_bytes=retain_bytes(self.device))

    def _env(self) -> dict[str, str]:
        return worker_env(self.device.type)

    def prepare_workers(self, count: int) -> None:
        """Have `count` workers of this runner waiting, to be taken by later `run`s (each by
        one; see pool.py)."""
        policy = self.sandbox_policy()
        shared_pool().prepare(self._env(), count,
                              _sandbox_maker(policy, self._warm_cache(policy)), policy)


class TimedOracle:
    """The driver's oracle with each reference computation timed as phase `reference`."""

    def __init__(self, oracle: ReferenceOracle) -> None:
        self.oracle = oracle
        self.problem = oracle.problem
        self.device = oracle.device

    def output_shapes(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        return self.oracle.output_shapes(workload)

    def expected(self, workload: Workload, seed: int) -> list:
        with phase("reference"):
            return self.oracle.expected(workload, seed)

    def inputs(self, workload: Workload, seed: int) -> list:
        with phase("inputs"):
            return self.oracle.inputs(workload, seed)

    def repeatable(self, workload: Workload, seed: int) -> bool:
        with phase("inputs"):
            return self.oracle.repeatable(workload, seed)

    def kept_bytes(self, workload: Workload, seed: int) -> int:
        return self.oracle.kept_bytes(workload, seed)

    def forget(self, workload: Workload, seed: int) -> None:
        self.oracle.forget(workload, seed)

    def release(self, workload: Workload) -> None:
        self.oracle.release(workload)


def worker_env(device_type: str) -> dict[str, str]:
    """The environment of a worker process on a device type."""
    env = python_env(dict(os.environ))
    env.pop(KEY_ENV, None)  # where the baseline store's key is: none of the worker's business
    env.pop(device_lock.ENV, None)  # the driver's alone (and beyond the sandbox's reach)
    env["PYTHONUNBUFFERED"] = "1"
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no compile-worker pool in the worker
    if device_type == "cpu":
        env["TRITON_INTERPRET"] = "1"  # read when triton is imported, in the worker
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def _sandbox_maker(policy: Policy, warm: Path | None) -> SandboxMaker | None:
    """How each of this runner's workers gets its own sandbox (None: the sandbox is off)."""
    if not policy.enabled:
        return None
    return lambda: Sandbox(policy, warm_cache=warm)


def _compiles(role: str, solution: Solution | None) -> bool:
    """Whether the worker runs torch.compile: the torch.compile baseline, or a candidate
    whose sources use it (Solution.preload_modules)."""
    if role == protocol.REFERENCE_COMPILE:
        return True
    return (role == protocol.CANDIDATE and solution is not None
            and "torch._dynamo" in solution.preload_modules())


def _placed(build: Build | None, sandbox: Sandbox | None) -> Build | None:
    """The build as the sandboxed worker sees it: its files copied into the private folder
    (of the compiler's output only the libraries)."""
    if build is None or sandbox is None:
        return build
    files = [p for p in build.folder.rglob("*") if p.is_file()
             and (p.relative_to(build.folder).parts[0] != "build" or p.suffix == ".so")]
    root = sandbox.copy_in(build.folder, files)
    library = root / build.library.relative_to(build.folder) if build.library else None
    return replace(build, folder=root, library=library)


def _await_ready(session: WorkerSession, timeout_s: float) -> None:
    """The worker's READY; its FAILURE (the solution did not load) is final. The steps of
    the worker's start that this wait saw are charged to `start_<step>` (startup.py)."""
    waited_from = time.monotonic()
    frame = session.receive(session.deadline(timeout_s), 0,
                            f"the solution did not load within {timeout_s:g} s")
    ready_at = time.monotonic()
    if frame.kind == protocol.FAILURE:
        raise WorkerLost(parse_status(frame.meta.get("status")), str(frame.meta.get("message", "")))
    if frame.kind != protocol.READY:
        raise WorkerLost(Status.RUNTIME_ERROR, f"protocol broken: {frame.kind} before ready")
    seconds = frame.meta.get("import_seconds")
    if isinstance(seconds, (int, float)):
        record("candidate_import", float(seconds))
    steps = waited_steps(frame.meta.get("startup"), session.spawned.started,
                         (waited_from, ready_at))
    for step, spent in steps.items():
        record(f"start_{step}", spent)


def _finish_all(pending: list[Workload], results: dict[str, WorkloadResult], status: Status,
                message: str) -> None:
    for workload in pending:
        results[workload.uuid] = WorkloadResult(workload.uuid, status, message)
    pending.clear()


def retain_bytes(device: torch.device) -> int:
    """Memory a worker may keep the latest timed calls' inputs in (the last two always, so
    their addresses change from call to call): an eighth of what is free, up to 8 GiB. With a
    quarter up to 16 GiB, a worker could keep four 4 GiB inputs of a log-softmax on an 80 GB
    H100; there the driver's reference beside it ran out of memory (the worker held 38.6 GiB,
    7.1 GiB were free)."""
    if device.type != "cuda":
        return 512 << 20
    free, _ = torch.cuda.mem_get_info(device)
    return min(8 << 30, free // 8)


def ahead_phase(kernels: Path | None) -> str:
    """The phase a candidate's copy of its kernels compiled ahead is timed under:
    `triton_ahead` when they were ready, `triton_ahead_none` when not (none kept yet, or none
    for this candidate), so the phase table's counts say how many units found them."""
    return "triton_ahead" if kernels is not None and kernels.is_dir() else "triton_ahead_none"
