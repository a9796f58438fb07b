"""The local runner: a pool of slots on this machine, one fresh process per unit.

A slot is one visible GPU (the unit's process sees only it, through CUDA_VISIBLE_DEVICES) or,
in CPU mode, one core. With `per_gpu` N > 1, N slots share each GPU: a GPU is otherwise idle
while a unit starts, imports and compiles its candidate and closes, and the N units take turns
on it through its device lock (harness/device_lock.py: their correctness rounds and warm-ups
side by side, each loop's timed calls alone). Each unit runs in a new interpreter
(`python -m solforge.runners.unit`) that lives as long as the unit: a crash, a leak or a
kill -9 ends that process alone, its slot goes back to the pool and the unit is started again
(see base.py). Inside, the harness starts the candidate's own worker process as it always does.

A C++/CUDA solution is compiled ahead, on the CPU cores, the moment it is submitted
(`prebuilt.build_unit` in a thread; the compiler runs in a process of its own): it takes a slot
only once its build is in the harness cache, where its unit finds it done, and a solution that
does not compile comes back as its failure traces without ever taking a slot. A torch.compile
baseline's unit waits the same way while its graphs are compiled ahead on the CPU cores
(`prebuilt.compile_ahead_unit`, harness/compile_ahead.py). Units that are ready go first, so a
GPU never waits on a compiler.

Each slot keeps spare unit processes started ahead (`unit.py --wait`; two on a GPU, one on the
CPU: SPARES_AHEAD): while a unit runs, the next ones' interpreters import torch, initialise CUDA
and pre-spawn their harness workers on the CPU, so the slot's next unit starts at once. The
worker is prepared for the problem and configuration of the unit just started on that slot (the
pool hands a worker only to a run of the same sandbox policy). A spare serves one unit, like a
fresh process (`SOLFORGE_WORKER_POOL=0` turns spares off). Slots that share a GPU keep one
spare each; `SOLFORGE_SPARES_AHEAD=N` gives every slot N instead.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.defaults import resolve_device
from solforge.errors import SolforgeError
from solforge.harness import compile_ahead, device_lock
from solforge.harness.pool import enabled as spares_enabled
from solforge.harness.process import describe_exit, kill_group, python_command, python_env
from solforge.runners.base import (
    DEFAULT_RETRIES,
    Attempt,
    Ended,
    EvalTask,
    Outcome,
    TaskRunner,
    describe_machine,
    failure_traces,
)
from solforge.runners.prebuilt import (
    BuildRefused,
    build_unit,
    compile_ahead_unit,
    needs_build,
    needs_compile_ahead,
)
from solforge.runners.unit import SPAWNED_AT_ENV

BUILT = -1  # on the queue of ended units: a compile ahead finished, a unit may be ready
COMPILE_WORKERS = max(1, min(8, (os.cpu_count() or 2) // 2))  # builds ahead at once
BASELINES_AHEAD = 2  # torch.compile baselines compiled ahead at once (prebuilt.compile_ahead_unit)
# Spare unit processes kept ahead per slot. A spare is ready about 10 s after it starts (its own
# interpreter, then its harness worker's) while a GPU unit of a template candidate lasts about
# 8 s (H200, 2026-12-01): with one spare every other unit waited for it. Two on a GPU; one per
# core on the CPU, whose units are slower and whose cores the spares would take.
SPARES_AHEAD = {"cuda": 2, "cpu": 1}
SPARES_ENV = "SOLFORGE_SPARES_AHEAD"  # spares per slot instead (0 to MAX_SPARES), for one run
MAX_SPARES = 4
MAX_PER_GPU = 8  # units sharing one GPU (device_lock.py); each holds two CUDA contexts
STOP_GRACE_S = 5.0  # after SIGTERM, a unit has this long to end its candidate's processes
LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class Slot:
    name: str  # "cuda:<id>" or "cpu:<n>"
    env: dict[str, str]  # what the unit's process gets on top of this process's environment


@dataclass(frozen=True)
class Spare:
    """A unit process started ahead for a slot, waiting for its task on stdin."""

    process: subprocess.Popen
    number: int  # names its files
    log_file: Path


@dataclass(frozen=True)
class RunningUnit:
    attempt: Attempt
    slot: int  # index into the runner's slots
    process: subprocess.Popen
    task_file: Path
    result_file: Path
    log_file: Path
    started: float  # time.monotonic()

    def outcome(self) -> Outcome | None:
        """The unit's result, or None when its process died before writing a whole one."""
        if self.process.returncode != 0 or not self.result_file.is_file():
            return None
        return pickle.loads(self.result_file.read_bytes())

    def loss(self) -> str:
        tail = self.log_file.read_text(errors="replace")[-LOG_TAIL_CHARS:].strip()
        died = f"the unit's process {describe_exit(self.process.returncode)}"
        return f"{died}; its output ends with: {tail}" if tail else died

    def remove_files(self) -> None:
        for path in (self.task_file, self.result_file, self.log_file):
            path.unlink(missing_ok=True)


def gpu_slots(device: torch.device, workers: int | None, per_gpu: int = 1,
              locks: Path | None = None) -> list[Slot]:
    """`per_gpu` slots per visible GPU (only the named one for `cuda:N`), at most `workers`,
    spread over the GPUs first. Slots that share a GPU share its device lock, a folder under
    `locks` (device_lock.py): their timed calls never overlap anything on that GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = ([i.strip() for i in visible.split(",") if i.strip()] if visible is not None
           else [str(i) for i in range(torch.cuda.device_count())])
    if device.index is not None:
        ids = ids[device.index:device.index + 1]
    if not ids:
        raise SolforgeError(f"--device {device}: no such GPU is visible")
    check_per_gpu(per_gpu)
    if workers is not None and workers > len(ids) * per_gpu:
        raise SolforgeError(f"--workers {workers}: only {len(ids)} GPU(s) visible, "
                            f"{per_gpu} unit(s) on each (--per-gpu)")
    if per_gpu > 1 and locks is None:
        raise ValueError("slots that share a GPU need a folder for its lock")
    envs = {gpu: {"CUDA_VISIBLE_DEVICES": gpu} for gpu in ids}
    if per_gpu > 1:
        for gpu, env in envs.items():
            env[device_lock.ENV] = str(device_lock.make_folder(locks / f"gpu-{gpu}"))
    slots = [Slot(f"cuda:{gpu}" + (f"#{k + 1}" if per_gpu > 1 else ""), envs[gpu])
             for k in range(per_gpu) for gpu in ids]
    return slots[:workers] if workers else slots


def check_per_gpu(per_gpu: int) -> None:
    if not 1 <= per_gpu <= MAX_PER_GPU:
        raise SolforgeError(f"--per-gpu {per_gpu}: between 1 and {MAX_PER_GPU} units share a GPU")


def cpu_slots(workers: int | None) -> list[Slot]:
    """One slot per core, or `workers`; the cores are shared out as torch threads."""
    cores = os.cpu_count() or 1
    count = workers or cores
    threads = {} if "OMP_NUM_THREADS" in os.environ else {
        "OMP_NUM_THREADS": str(max(1, cores // count))}
    return [Slot(f"cpu:{n}", threads) for n in range(count)]


def spares_per_slot(device_type: str, per_gpu: int) -> int:
    """Spare unit processes each slot keeps ahead: SPARES_ENV's count where it is set, else
    SPARES_AHEAD's for the device, shared among the slots of one GPU (at least one each).

    Shared, a slot's spare has one unit's time to get ready. On an H100 with 3 units (2026-12-05)
    the driver still waited about 2.7 s a candidate for its worker's start, 2.1 s of it in
    CUPTI's first session: SPARES_ENV lets a run give each slot more lead and measure it."""
    given = os.environ.get(SPARES_ENV, "").strip()
    if not given:
        shared = SPARES_AHEAD[device_type]
        return shared if per_gpu == 1 else max(1, shared // per_gpu)
    if not given.isdigit() or int(given) > MAX_SPARES:
        raise SolforgeError(f"{SPARES_ENV}={given!r}: give the spare units per slot as a whole "
                            f"number from 0 to {MAX_SPARES}")
    return int(given)


class LocalRunner(TaskRunner):
    def __init__(self, device: str, workers: int | None = None,
                 retries: int = DEFAULT_RETRIES, per_gpu: int = 1) -> None:
        resolve_device(device)  # no CUDA device at all, or not cuda|cpu: a clear error first
        requested = torch.device(device)
        check_per_gpu(per_gpu)
        if per_gpu > 1 and requested.type != "cuda":
            raise SolforgeError(f"--per-gpu {per_gpu} is for GPUs; on the CPU each unit has a "
                                "core (--workers)")
        spares_ahead = spares_per_slot(requested.type, per_gpu)
        self._folder = Path(tempfile.mkdtemp(prefix="solforge-units-"))  # mode 0700
        try:
            self._slots = (gpu_slots(requested, workers, per_gpu, self._folder / "locks")
                           if requested.type == "cuda" else cpu_slots(workers))
        except BaseException:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        super().__init__(describe_machine(device), len(self._slots), retries,
                         in_flight=len(self._slots))
        self._free = list(range(len(self._slots)))
        self._spares_ahead = spares_ahead
        self._ended: queue.Queue[int] = queue.Queue()
        self._units: dict[int, RunningUnit] = {}
        self._spares: dict[int, list[Spare]] = {}  # slot -> its spares, oldest first
        self._started = 0
        self._device_type = requested.type
        self._compiler = ThreadPoolExecutor(COMPILE_WORKERS, "compile-ahead")
        # torch.compile baselines compiled ahead: a few units at once, each in a few processes
        # holding a CUDA context and one workload's inputs (compile_ahead.MAX_INPUT_BYTES)
        self._baselines_ahead = ThreadPoolExecutor(BASELINES_AHEAD, "baseline-compile-ahead")
        self._stopping = False
        self._builds: dict[int, Future] = {}  # id(attempt) -> its build ahead
        self._refused: dict[int, tuple[Attempt, Ended]] = {}  # ended without a process

    def submit(self, task: EvalTask, first: bool = False) -> None:
        attempt = Attempt(task)
        pool = (self._compiler if needs_build(task) else
                self._baselines_ahead if needs_compile_ahead(task) else None)
        if pool is not None:
            ahead = build_unit if pool is self._compiler else self._compile_ahead
            future = pool.submit(ahead, task)
            future.add_done_callback(lambda _: self._ended.put(BUILT))
            self._builds[id(attempt)] = future
        self._queue(attempt, first)
        self._fill()

    @contextlib.contextmanager
    def exclusive_device(self) -> Iterator[None]:
        """Every GPU of this runner to the caller alone (a profiler's replays, say): no unit
        times or runs its rounds meanwhile (device_lock.all_alone)."""
        folders = {Path(slot.env[device_lock.ENV]) for slot in self._slots
                   if device_lock.ENV in slot.env}
        with device_lock.all_alone(list(folders)):
            yield

    def _compile_ahead(self, task: EvalTask) -> Path | None:
        """The unit's torch.compile baseline compiled ahead, unless the runner is stopping."""
        return None if self._stopping else compile_ahead_unit(task)

    def _ready(self, attempt: Attempt) -> bool:
        future = self._builds.get(id(attempt))
        return future is None or future.done()

    def _start(self, attempt: Attempt) -> None:
        built = self._builds.pop(id(attempt), None)
        value = built.result() if built is not None and built.exception() is None else None
        if isinstance(value, BuildRefused):  # a compile error never takes a slot
            traces = failure_traces(attempt.task, self.machine, value.status, value.message)
            number = self._next_number()
            self._refused[number] = (attempt, Ended(Outcome(traces), "", "local (compile)",
                                                    0.0, value.seconds))
            self._ended.put(number)
            return
        slot = self._free.pop(0)
        spares = self._spares.setdefault(slot, [])
        spare = spares.pop(0) if spares else None
        number = spare.number if spare else self._next_number()
        task_file, result_file, log_file = self._files(number)
        task_file.write_bytes(pickle.dumps(attempt.task))
        started = time.monotonic()
        if spare is not None and spare.process.poll() is None:
            process = spare.process
            with contextlib.suppress(BrokenPipeError, OSError):
                process.stdin.write(f"{task_file}\t{result_file}\t{time.time()}\n".encode())
                process.stdin.close()
        else:
            process = self._spawn(slot, [str(task_file), str(result_file)], log_file)
        self._units[number] = RunningUnit(attempt, slot, process, task_file, result_file,
                                          log_file, started)
        threading.Thread(target=self._watch, args=(number, process), daemon=True).start()
        while spares_enabled() and len(spares) < self._spares_ahead:
            spares.append(self._spare(slot, task_file))

    def _spare(self, slot: int, like: Path) -> Spare:
        """A unit process for `slot` started ahead; its worker is prepared like the unit of
        task file `like` (the slot's next units are most often candidates of its problem)."""
        number = self._next_number()
        log_file = self._files(number)[2]
        process = self._spawn(slot, ["--wait", self._device_type, str(like)], log_file,
                              stdin=subprocess.PIPE)
        return Spare(process, number, log_file)

    def _next_number(self) -> int:
        self._started += 1
        return self._started

    def _files(self, number: int) -> list[Path]:
        return [self._folder / f"{number}.{kind}" for kind in ("task", "result", "log")]

    def _spawn(self, slot: int, args: list[str], log_file: Path,
               stdin: int = subprocess.DEVNULL) -> subprocess.Popen:
        env = {**python_env(dict(os.environ)), **self._slots[slot].env,
               SPAWNED_AT_ENV: str(time.time())}
        argv = python_command("solforge.runners.unit", *args)
        with log_file.open("wb") as log:
            return subprocess.Popen(argv, stdin=stdin, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)

    def _watch(self, number: int, process: subprocess.Popen) -> None:
        process.wait()
        self._ended.put(number)

    def _wait_any(self, timeout: float | None) -> tuple[Attempt, Ended] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                number = self._ended.get(timeout=left)
            except queue.Empty:
                return None
            if number == BUILT:
                self._fill()  # a unit whose build was pending may take a free slot now
                continue
            if number in self._refused:
                return self._refused.pop(number)
            return self._end_unit(number)

    def _end_unit(self, number: int) -> tuple[Attempt, Ended]:
        unit = self._units.pop(number)
        self._free.append(unit.slot)
        seconds = time.monotonic() - unit.started
        name = self._slots[unit.slot].name
        outcome = unit.outcome()
        reason = "" if outcome is not None else unit.loss()
        unit.remove_files()
        return unit.attempt, Ended(outcome, reason, name, seconds)

    def _stop_all(self) -> None:
        """SIGTERM every unit (it closes its candidate's worker on the way out), then SIGKILL
        whatever is left after the grace period."""
        self._stopping = True
        self._compiler.shutdown(wait=False, cancel_futures=True)
        self._baselines_ahead.shutdown(wait=False, cancel_futures=True)
        compile_ahead.stop_all()  # a compile still running ahead ends now, not at exit
        processes = [unit.process for unit in self._units.values()]
        processes += [spare.process for spares in self._spares.values() for spare in spares]
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()  # a spare's exit kills the worker it had waiting
        deadline = time.monotonic() + STOP_GRACE_S
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            kill_group(process)
        self._units.clear()
        self._spares.clear()
        shutil.rmtree(self._folder, ignore_errors=True)
