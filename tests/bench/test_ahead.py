"""A bench on a GPU compiles its Triton solutions' kernels ahead (bench/ahead.py), in the
order their units were queued, keeps each until its unit has ended, and nothing after the
bench. The compile itself is forge/capture.compile_ahead (tests/forge/test_compile_ahead.py);
here it is replaced by a fake that keeps one file."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from solforge.bench import run as bench_run
from solforge.bench.ahead import CAPTURE_LIMIT_S, KernelsAhead
from solforge.bench.run import BenchConfig, SilentReporter, kernels_ahead
from solforge.data.solution import solution_from_python
from solforge.forge import capture
from solforge.harness.evaluate import EvalConfig
from solforge.harness.sandbox import jit_ahead
from solforge.runners import EvalTask, TaskResult

TRITON = "import triton\n\n\ndef run(x, out):\n    out.copy_(x)  # {tag}\n"
PYTORCH = "import torch\n\n\ndef run(x):\n    return x.clone()\n"


def _solution(tag: str, source: str = TRITON):
    return solution_from_python(source.format(tag=tag), f"s_{tag}", "p")


@pytest.fixture
def compiled(monkeypatch, tmp_path):
    """The fake compile: records its calls and keeps one file; `gate` holds it back."""
    calls: list[tuple[str, tuple[str, ...], bool, float]] = []
    gate = threading.Event()
    gate.set()

    def compile_ahead(solution, problem, workloads, keep_triton, timeout_s=600.0,
                      every_config=False):
        gate.wait(10)
        calls.append((solution.name, tuple(w.uuid for w in workloads), every_config,
                      timeout_s))
        cache = tmp_path / f"triton-{solution.name}"
        (cache / "H").mkdir(parents=True, exist_ok=True)
        (cache / "H" / "k.cubin").write_bytes(b"cubin")
        keep_triton(cache)
        return len(workloads)

    monkeypatch.setattr(capture, "compile_ahead", compile_ahead)
    return SimpleNamespace(calls=calls, gate=gate)


def _workloads(*uuids: str):
    return tuple(SimpleNamespace(uuid=uuid) for uuid in uuids)


def _drain(*futures) -> None:
    for future in futures:
        if future is not None and not future.cancelled():
            future.result(timeout=10)


def test_each_triton_solution_is_compiled_in_every_config_and_kept_until_its_unit_ends(
        tmp_path, compiled):
    ahead = KernelsAhead(tmp_path / "ahead", workers=1)
    first, second, plain = _solution("a"), _solution("b"), _solution("c", PYTORCH)
    futures = [ahead.submit(first, SimpleNamespace(), _workloads("w0", "w1")),
               ahead.submit(plain, SimpleNamespace(), _workloads("w0")),
               ahead.submit(second, SimpleNamespace(), _workloads("w1"))]
    assert futures[1] is None  # no Triton: nothing to compile
    _drain(*futures)
    # every config; a time limit, which also bounds the bench's wait at its exit
    assert compiled.calls == [("s_a", ("w0", "w1"), True, CAPTURE_LIMIT_S),
                              ("s_b", ("w1",), True, CAPTURE_LIMIT_S)]
    kept = {s.name: jit_ahead.folder(ahead.root, s) / "H" / "k.cubin" for s in (first, second)}
    assert all(path.read_bytes() == b"cubin" for path in kept.values())
    ahead.ended(first)
    assert not kept["s_a"].exists() and kept["s_b"].exists()
    ahead.close()
    assert not kept["s_b"].exists(), "nothing outlives the bench"


def test_a_unit_that_ended_or_a_closed_bench_keeps_nothing_compiled_late(tmp_path, compiled):
    ahead = KernelsAhead(tmp_path / "ahead", workers=1)
    early, late = _solution("early"), _solution("late")
    compiled.gate.clear()  # the captures are still running when the units end
    future = ahead.submit(early, SimpleNamespace(), _workloads("w0"))
    ahead.ended(early)
    compiled.gate.set()
    _drain(future)
    assert not jit_ahead.folder(ahead.root, early).exists()
    compiled.gate.clear()
    ahead.submit(late, SimpleNamespace(), _workloads("w0"))
    ahead.close()  # returns at once: the running capture ends by itself
    compiled.gate.set()
    ahead._pool.shutdown(wait=True)
    assert not jit_ahead.folder(ahead.root, late).exists()


def test_a_failed_compile_leaves_the_kernels_to_the_worker(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("ptxas died")

    monkeypatch.setattr(capture, "compile_ahead", broken)
    ahead = KernelsAhead(tmp_path / "ahead", workers=1)
    _drain(ahead.submit(_solution("a"), SimpleNamespace(), _workloads("w0")))  # none escapes
    ahead.close()
    assert not (tmp_path / "ahead").exists()


def test_only_a_local_gpu_bench_compiles_ahead_into_the_harness_cache(tmp_path):
    local = BenchConfig(device="cuda", cache_dir=tmp_path / "cache")
    ahead = kernels_ahead(local, "cuda")
    assert ahead is not None and ahead.root == tmp_path / "cache" / jit_ahead.FOLDER
    ahead.close()
    assert kernels_ahead(local, "cpu") is None  # Triton's interpreter compiles nothing
    assert kernels_ahead(replace(local, runner="ray"), "cuda") is None  # other machines


@dataclass(frozen=True)
class _Unit:
    problem: SimpleNamespace
    label: str
    kind: str | None
    solution: object
    workloads: tuple = ()

    def task(self, config: EvalConfig, key: str) -> EvalTask:
        solution = None if self.kind else {"name": self.solution}
        return EvalTask(self.problem.address, config, solution, self.kind, key)


class _Runner:
    """Starts units in submission order and hands each back as ended, with no traces."""

    def __init__(self) -> None:
        self.queue: list[EvalTask] = []
        self.withdrawn: list[str] = []

    @property
    def pending(self) -> int:
        return len(self.queue)

    def submit(self, task: EvalTask, first: bool = False) -> None:
        self.queue.insert(0, task) if first else self.queue.append(task)

    def next_result(self, timeout: float | None) -> TaskResult | None:
        return TaskResult(self.queue.pop(0), (), 1, "cuda:0", 1.0) if self.queue else None


class _Ahead:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def submit(self, solution, problem, workloads) -> None:
        self.events.append(("submit", solution))

    def ended(self, solution) -> None:
        self.events.append(("ended", solution))


def test_the_scheduler_compiles_solutions_in_queue_order_and_ends_each_with_its_unit(
        monkeypatch):
    monkeypatch.setattr(bench_run, "stored_baseline_traces", lambda unit, config: [])
    units = [_Unit(SimpleNamespace(address=address, problem=None), label, kind, solution)
             for address in ("l1/a", "l1/b")
             for label, kind, solution in (("reference:eager", "eager", None),
                                           (f"{address}:mine", None, f"{address}-mine"))]
    ahead = _Ahead()
    scheduler = bench_run.UnitScheduler(_Runner(), EvalConfig(device="cpu"), SilentReporter(),
                                        ahead=ahead)
    scheduler.start(units)
    assert ahead.events == [("submit", "l1/a-mine"), ("submit", "l1/b-mine")]
    scheduler.collect(lambda unit, trace: None)
    assert ahead.events[2:] == [("ended", "l1/a-mine"), ("ended", "l1/b-mine")]


def test_kept_kernels_sit_where_the_units_worker_looks(tmp_path):
    """The worker's supervisor looks in EvalConfig.cache_dir / jit_ahead.FOLDER."""
    config = BenchConfig(device="cuda", cache_dir=tmp_path / "cache")
    unit_config = bench_run.eval_config(config, "cuda")
    ahead = kernels_ahead(config, "cuda")
    assert ahead.root == Path(unit_config.cache_dir) / jit_ahead.FOLDER
    ahead.close()


def test_the_phase_table_counts_the_units_that_found_their_kernels_ready(tmp_path):
    """A worker's copy of its kernels is timed as `triton_ahead` when they were kept in time
    and as `triton_ahead_none` when not, so a bench's phase counts say whether compiling
    ahead kept up with the GPU."""
    from solforge.harness.supervisor import ahead_phase

    kept = tmp_path / "kept"
    kept.mkdir()
    assert ahead_phase(kept) == "triton_ahead"
    assert ahead_phase(tmp_path / "not-yet") == "triton_ahead_none"
    assert ahead_phase(None) == "triton_ahead_none"
