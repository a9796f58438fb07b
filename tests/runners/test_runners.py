"""The runners on the CPU: local processes and a real Ray cluster (a 2-CPU head node started
here, on loopback), each evaluating honest fixtures on rmsnorm_small (Triton through its
interpreter); a unit whose process is killed with SIGKILL mid-task, retried then recorded as
failed; the C++ build handed from a CPU task to the evaluating task; and `solforge bench`
dispatching through both runners without losing a trace."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from harness_corpus import HONEST, PROBLEMS, short_limits
from typer.testing import CliRunner

from solforge.bench import BenchConfig, find_solutions, open_store, plan_problems, run_bench
from solforge.cli import app
from solforge.data.solution import load_solution, solution_from_python
from solforge.data.trace import Status
from solforge.errors import SolforgeError
from solforge.harness.evaluate import EvalConfig
from solforge.harness.session import Limits
from solforge.runners import EvalTask, TaskResult, base, local, open_runner
from solforge.runners.prebuilt import Prebuilt, beside_library, build_unit, install
from solforge.runners.unit import execute
from solforge.store.schema import TraceRow

SMALL = str(PROBLEMS / "rmsnorm_small")
KILLS_DRIVER = PROBLEMS / "kills_driver" / "solution.py"
KILLS_DRIVER_ONCE = PROBLEMS / "kills_driver_once" / "solution.py"
RAY_START_S = 60.0
# A loopback address Ray does not rewrite: it replaces 127.0.0.1 with the machine's own address.
RAY_HOST = "127.0.0.2"


def _solution(path: Path) -> dict:
    """A fixture as solution JSON, named after its folder (a bare .py file names none)."""
    if path.suffix == ".py":
        return solution_from_python(path.read_text(), path.parent.name, "rmsnorm_small").to_dict()
    return load_solution(path, "rmsnorm_small").to_dict()


def _driver_killable() -> Limits:
    """Without the sandbox: kills_driver stands for any death of a unit's process, and in the
    sandbox a candidate cannot kill its driver (tests/harness/test_sandbox.py)."""
    return replace(short_limits(), sandbox=False)


def _config(cache: Path) -> EvalConfig:
    return EvalConfig(device="cpu", baseline="eager", smallest=1, limits=short_limits(),
                      cache_dir=cache)


def _run(runner_kind: str, tasks: list[EvalTask], **options) -> dict[str, TaskResult]:
    with open_runner(runner_kind, "cpu", workers=2, **options) as runner:
        for task in tasks:
            runner.submit(task)
        results = {result.task.key: result for result in runner.results()}
        assert runner.pending == 0
    return results


def _statuses(result: TaskResult) -> list[str]:
    return [trace.evaluation.status.value for trace in result.traces]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A Ray head node with 2 CPUs on loopback (token authentication, no usage reports), the
    way a cluster's head is started; stopped by its process id afterwards. The token is in
    the environment before Ray is first imported: Ray reads its authentication mode then."""
    port = _free_port()
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               "--port", str(port), "--node-ip-address", RAY_HOST, "--num-cpus", "2",
               "--num-gpus", "0", "--include-dashboard=false",
               "--dashboard-port", str(_free_port()), "--object-store-memory", "200000000",
               "--disable-usage-stats"]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        pytest.importorskip("ray", reason="the Ray tests need Ray: pip install 'solforge[ray]'")
        head = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            _wait_for_port(port, head)
            yield f"{RAY_HOST}:{port}"
        finally:
            head.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes
            try:
                head.wait(timeout=RAY_START_S)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
                head.wait()


def _wait_for_port(port: int, head: subprocess.Popen) -> None:
    deadline = time.monotonic() + RAY_START_S
    while time.monotonic() < deadline:
        if head.poll() is not None:
            pytest.fail(f"ray start --head exited with code {head.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex((RAY_HOST, port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"the Ray head node did not listen on port {port} within {RAY_START_S:g} s")


# -- the interface -----------------------------------------------------------------------------

def test_a_unit_is_a_solution_or_a_baseline(tmp_path):
    config = _config(tmp_path)
    assert EvalTask(SMALL, config, baseline="eager").label == "reference:eager"
    assert EvalTask(SMALL, config, solution={"name": "fast"}).label == "fast"
    for roles in ({}, {"baseline": "eager", "solution": {"name": "fast"}}):
        with pytest.raises(SolforgeError, match="either a solution or a baseline"):
            EvalTask(SMALL, config, **roles)
    with pytest.raises(SolforgeError, match="unknown baseline kind"):
        EvalTask(SMALL, config, baseline="best")


def test_bad_runner_choices_are_refused_clearly():
    for kind, options, phrase in (("slurm", {}, "unknown; the runners are local, ray"),
                                  ("local", {"workers": 0}, "at least one worker"),
                                  ("local", {"ray_address": "auto"}, "only for --runner ray")):
        with pytest.raises(SolforgeError, match=phrase):
            open_runner(kind, "cpu", **options)
    if not os.environ.get("CUDA_VISIBLE_DEVICES") and not _has_gpu():
        with pytest.raises(SolforgeError, match="no CUDA device"):
            open_runner("local", "cuda")


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# -- the local runner --------------------------------------------------------------------------

@pytest.mark.slow
def test_local_runner_runs_units_side_by_side_and_hands_each_back_when_done(tmp_path):
    config = _config(tmp_path / "cache")
    tasks = [EvalTask(SMALL, config, baseline="eager", key="eager"),
             EvalTask(SMALL, config, solution=_solution(HONEST / "pytorch_rmsnorm" /
                                                        "solution.py"), key="pytorch"),
             EvalTask(SMALL, config, solution=_solution(HONEST / "triton_rmsnorm" /
                                                        "solution.json"), key="triton"),
             EvalTask("l9/no_such_problem", config, baseline="eager", key="missing")]
    with open_runner("local", "cpu", workers=2) as runner:
        assert runner.slots == 2 and runner.machine.device_type == "cpu"
        for task in tasks:
            runner.submit(task)
        assert runner.next_result(timeout=0) is None  # nothing ends at once
        results = {result.task.key: result for result in runner.results()}
    for key in ("eager", "pytorch", "triton"):
        assert _statuses(results[key]) == ["PASSED"], results[key]
        assert results[key].attempts == 1 and results[key].seconds > 0
    assert {results[key].slot for key in results} == {"cpu:0", "cpu:1"}
    missing = results["missing"]
    assert missing.traces == () and "neither a problem folder" in missing.error


@pytest.mark.slow
def test_local_runner_keeps_spares_ahead_that_serve_the_next_units(tmp_path, monkeypatch):
    """Two spares per slot (the GPU's count): both start with the first unit, the next units
    run in them, and closing the runner ends every spare and the worker it had waiting."""
    monkeypatch.setitem(local.SPARES_AHEAD, "cpu", 2)
    monkeypatch.delenv("SOLFORGE_WORKER_POOL", raising=False)
    config = _config(tmp_path / "cache")
    solution = _solution(HONEST / "pytorch_rmsnorm" / "solution.py")
    with open_runner("local", "cpu", workers=1) as runner:
        runner.submit(EvalTask(SMALL, config, solution=solution, key="first"))
        ahead = [spare.process for spare in runner._spares[0]]
        assert len(ahead) == 2 and all(p.poll() is None for p in ahead)
        results = [runner.next_result()]
        for key in ("second", "third"):
            runner.submit(EvalTask(SMALL, config, solution=solution, key=key))
        served = {unit.process for unit in runner._units.values()}
        assert served == {ahead[0]}  # the oldest spare took the second unit
        results += list(runner.results())
        left = [spare.process for spare in runner._spares[0]]
    assert [r.task.key for r in results] == ["first", "second", "third"]
    assert all(_statuses(r) == ["PASSED"] for r in results), results
    assert all(p.poll() is not None for p in ahead + left)


@pytest.mark.slow
def test_local_runner_compiles_ahead_and_a_compile_error_never_takes_a_slot(tmp_path):
    config = _config(tmp_path / "cache")
    broken = {**json.loads((HONEST / "cpp_rmsnorm" / "solution.json").read_text()),
              "name": "broken_cpp"}
    broken["sources"] = [{**source, "content": source["content"] + "\nint broken( {\n"}
                         if source["path"].endswith(".cpp") else source
                         for source in broken["sources"]]
    tasks = [EvalTask(SMALL, config, solution=broken, key="broken"),
             EvalTask(SMALL, config, solution=_solution(HONEST / "pytorch_rmsnorm" /
                                                        "solution.py"), key="pytorch")]
    results = _run("local", tasks)
    assert _statuses(results["broken"]) == ["COMPILE_ERROR"]
    assert results["broken"].slot == "local (compile)" and results["broken"].seconds == 0.0
    assert _statuses(results["pytorch"]) == ["PASSED"]
    assert results["pytorch"].phases["worker_wait"]["count"] >= 1  # phases come back


@pytest.mark.slow  # about 30 s with the local runner, a minute with Ray (a head node starts)
@pytest.mark.parametrize("runner_kind", ["local", "ray"])
def test_a_unit_whose_process_is_killed_is_retried_then_recorded_as_failed(
        runner_kind, tmp_path, request):
    options = ({"ray_address": request.getfixturevalue("ray_address")}
               if runner_kind == "ray" else {})
    config = replace(_config(tmp_path / "cache"), limits=_driver_killable())
    tasks = [EvalTask(SMALL, config, solution=_solution(KILLS_DRIVER), key="always"),
             EvalTask(SMALL, config, solution=_solution(KILLS_DRIVER_ONCE), key="once"),
             EvalTask(SMALL, config, solution=_solution(HONEST / "triton_rmsnorm" /
                                                        "solution.json"), key="honest")]
    results = _run(runner_kind, tasks, **options)
    assert _statuses(results["honest"]) == ["PASSED"] and results["honest"].attempts == 1
    assert _statuses(results["once"]) == ["PASSED"] and results["once"].attempts == 2
    always = results["always"]
    assert always.attempts == 2 and always.error is None
    assert ("SIGKILL" if runner_kind == "local" else "WorkerCrashedError") in always.lost
    [trace] = always.traces  # one per workload it was to evaluate, each saying why
    assert trace.evaluation.status is Status.RUNTIME_ERROR
    assert trace.solution == "kills_driver" and trace.workload["uuid"] == "small-t8"
    assert "died on every attempt (attempt 1:" in trace.evaluation.log


# -- the compile step as its own task ----------------------------------------------------------

@pytest.fixture(scope="module")
def cpp_build(tmp_path_factory) -> tuple[Path, dict, Prebuilt]:
    """The honest C++ RMSNorm built once, by the compile task's own function."""
    cache = tmp_path_factory.mktemp("cpp-cache")
    solution = json.loads((HONEST / "cpp_rmsnorm" / "solution.json").read_text())
    prebuilt = build_unit(EvalTask(SMALL, _config(cache), solution=solution))
    assert isinstance(prebuilt, Prebuilt), prebuilt
    return cache, solution, prebuilt


def test_a_build_carries_the_shared_objects_its_library_loads(tmp_path):
    """A TVM-FFI build's library is a loader module that opens build/<name>.so: both travel,
    and the loader is written last (a build counts as done once its library is there)."""
    folder = tmp_path / "built" / "tvm_solution-0123"
    (folder / "build").mkdir(parents=True)
    (folder / "build" / "tvm_solution.so").write_bytes(b"\x7fELF shared object")
    loader = folder / "tvm_ffi_loader.py"
    loader.write_text("load build/tvm_solution.so\n")
    prebuilt = Prebuilt(folder.name, loader.name, loader.read_bytes(), 1.0,
                        beside_library(folder, loader))
    assert [path for path, _ in prebuilt.beside] == ["build/tvm_solution.so"]
    target = install(prebuilt, _config(tmp_path / "gpu-node"))
    assert target.read_text() == "load build/tvm_solution.so\n"
    shared = target.parent / "build" / "tvm_solution.so"
    assert shared.read_bytes() == b"\x7fELF shared object"
    assert shared.stat().st_mtime_ns <= target.stat().st_mtime_ns
    torch_extension = folder / "build" / "tvm_solution.so"  # a library that is the .so itself
    assert beside_library(folder, torch_extension) == ()


@pytest.mark.slow
def test_an_installed_build_is_evaluated_without_compiling_again(cpp_build, tmp_path):
    _, solution, prebuilt = cpp_build
    no_time_to_compile = replace(_config(tmp_path / "gpu-node"), compile_timeout_s=0.001)
    task = EvalTask(SMALL, no_time_to_compile, solution=solution)
    assert execute(task).traces[0].evaluation.status is Status.TIMEOUT  # it would compile
    fresh = replace(task, config=replace(no_time_to_compile, cache_dir=tmp_path / "other"))
    install(prebuilt, fresh.config)
    assert [t.evaluation.status for t in execute(fresh).traces] == [Status.PASSED]


@pytest.mark.slow
def test_ray_builds_cpp_in_a_cpu_task_and_a_failed_build_never_reaches_evaluation(
        cpp_build, ray_address):
    cache, solution, _ = cpp_build
    broken = json.loads(json.dumps(solution))
    broken["name"] = "broken_cpp"
    broken["sources"][0]["content"] += "\nthis is not C++;\n"
    config = _config(cache)
    results = _run("ray", [EvalTask(SMALL, config, solution=solution, key="built"),
                           EvalTask(SMALL, config, solution=broken, key="broken")],
                   ray_address=ray_address)
    built, refused = results["built"], results["broken"]
    assert _statuses(built) == ["PASSED"] and built.build_seconds is not None
    assert built.slot.startswith(f"ray:{RAY_HOST}")
    assert _statuses(refused) == ["COMPILE_ERROR"] and refused.slot == "ray (compile)"
    assert "this is not C++" in refused.traces[0].evaluation.log  # the compiler's message


# -- solforge bench through the runners --------------------------------------------------------

@pytest.fixture
def solutions(tmp_path) -> Path:
    folder = tmp_path / "solutions"
    folder.mkdir()
    for path in (HONEST / "pytorch_rmsnorm" / "solution.py", KILLS_DRIVER):
        (folder / f"{path.parent.name}.json").write_text(json.dumps(_solution(path)))
    return folder


@pytest.mark.slow
def test_bench_saves_every_trace_and_records_a_lost_unit_as_failed(tmp_path, solutions):
    store = open_store(f"sqlite:///{tmp_path / 'bench.db'}")
    problems = plan_problems([SMALL], find_solutions([solutions]), "cpu")
    config = BenchConfig(device="cpu", baseline="eager", limits=_driver_killable(),
                         cache_dir=tmp_path / "cache", workers=2)
    outcome = run_bench(problems, store, config)
    statuses = {row.record["solution"]: row.status for row in store.rows(TraceRow)}
    assert statuses == {"reference:eager": "PASSED", "pytorch_rmsnorm": "PASSED",
                        "kills_driver": "RUNTIME_ERROR"}
    assert outcome.measured == 3 and not outcome.interrupted
    [failure] = outcome.failures
    assert "kills_driver: its process died on each of 2 attempts" in failure
    again = run_bench(problems, store, config)  # the failure is recorded: nothing left to do
    assert (again.measured, again.skipped) == (0, 3)


@pytest.mark.slow
def test_cli_bench_on_a_ray_cluster(tmp_path, solutions, ray_address, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path / "cache"))
    (solutions / "kills_driver.json").unlink()
    db = f"sqlite:///{tmp_path / 'ray.db'}"
    result = CliRunner().invoke(app, ["bench", SMALL, "--device", "cpu", "--runner", "ray",
                                      "--ray-address", ray_address, "--workers", "2",
                                      "--solutions", str(solutions), "--no-bundled",
                                      "--db", db])
    assert result.exit_code == 0, result.output
    assert "2 traces measured" in result.output
    rows = open_store(db).rows(TraceRow)
    assert sorted(row.status for row in rows) == ["PASSED", "PASSED"]


# -- on a GPU (benchmarks/run_gpu_checks.sh runs these on the H200) ------------------------------

def _gpu_config(cache: Path) -> EvalConfig:
    return EvalConfig(device="cuda", baseline="eager", limits=short_limits(), cache_dir=cache)


def _gpu_tasks(config: EvalConfig) -> list[EvalTask]:
    return [EvalTask(SMALL, config, baseline="eager", key="eager"),
            EvalTask(SMALL, config, solution=_solution(HONEST / "triton_rmsnorm" /
                                                       "solution.json"), key="triton"),
            EvalTask(SMALL, config, solution=_solution(HONEST / "cuda_rmsnorm" /
                                                       "solution.json"), key="cuda")]


@pytest.mark.gpu
def test_local_runner_gives_each_unit_a_gpu_of_its_own(tmp_path):
    import torch

    with open_runner("local", "cuda") as runner:
        assert runner.slots == torch.cuda.device_count()
        assert runner.machine.device_type == "cuda" and runner.machine.cuda_arch
        for task in _gpu_tasks(_gpu_config(tmp_path)):
            runner.submit(task)
        results = {result.task.key: result for result in runner.results()}
        hardware = runner.machine.hardware
    for result in results.values():
        assert _statuses(result) == ["PASSED"] * 2, result
        assert result.slot.startswith("cuda:")
        assert {t.evaluation.environment.hardware for t in result.traces} == {hardware}


@pytest.mark.gpu
def test_local_runner_puts_units_side_by_side_on_one_gpu(tmp_path):
    """Three units share GPU 0 (harness/device_lock.py): each waited for the lock (its rounds
    shared, its timed loop alone) and passed as it does alone."""
    with open_runner("local", "cuda:0", per_gpu=3) as runner:
        assert runner.slots == 3
        for task in _gpu_tasks(_gpu_config(tmp_path)):
            runner.submit(task)
        with runner.exclusive_device():  # what a profiler would hold: units wait meanwhile
            time.sleep(0.5)
        results = list(runner.results())
    assert sorted(r.slot for r in results) == ["cuda:0#1", "cuda:0#2", "cuda:0#3"]
    for result in results:
        assert _statuses(result) == ["PASSED"] * 2, result
        waits = sum(e["count"] for name, e in result.phases.items()
                    if name.endswith("device_wait"))
        assert waits >= 4, result.phases  # 2 workloads x (rounds, loop)


@pytest.mark.gpu
def test_ray_evaluates_on_gpus_and_compiles_cuda_in_a_cpu_task(tmp_path):
    pytest.importorskip("ray", reason="the Ray tests need Ray: pip install 'solforge[ray]'")
    with open_runner("ray", "cuda") as runner:  # a Ray instance of its own on this machine
        assert runner.machine.device_type == "cuda"
        for task in _gpu_tasks(_gpu_config(tmp_path)):
            runner.submit(task)
        results = {result.task.key: result for result in runner.results()}
    for result in results.values():
        assert _statuses(result) == ["PASSED"] * 2, result
        assert ":gpu" in result.slot
    assert results["cuda"].build_seconds is not None  # built by the CPU task, not on the GPU
    assert results["triton"].build_seconds is None


# -- the optimizer through the runners -----------------------------------------------------------

@pytest.mark.slow
def test_optimize_judges_candidates_side_by_side_on_the_local_runner(tmp_path):
    from solforge.forge import archive
    from solforge.forge.loop import OptimizeConfig, Optimizer
    from solforge.problem import load_problem

    problem = load_problem(SMALL)
    store = open_store(f"sqlite:///{tmp_path / 'forge.db'}")
    config = OptimizeConfig(budget=2, device="cpu", baseline="eager",
                            cache_dir=tmp_path / "cache")
    lines: list[str] = []
    with open_runner("local", "cpu", workers=2) as runner:
        outcome = Optimizer(problem, store, config, lines.append, runner=runner,
                            address=SMALL).run()
    assert outcome.judged == 2 and outcome.best is not None
    slots = {line.rsplit(" on ", 1)[1].split()[0] for line in lines if "judged on" in line}
    assert slots == {"cpu:0", "cpu:1"}, lines  # a batch of two ran in both slots
    stored = archive.candidates(store, problem.name)
    assert len(stored) == 2 and all(c.status == "PASSED" for c in stored)


@pytest.mark.slow
def test_cli_optimize_on_a_ray_cluster(tmp_path, ray_address, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path / "cache"))
    db = f"sqlite:///{tmp_path / 'ray-forge.db'}"
    result = CliRunner().invoke(app, ["optimize", SMALL, "--device", "cpu", "--runner", "ray",
                                      "--ray-address", ray_address, "--workers", "2",
                                      "--budget", "2", "--db", db,
                                      "-o", str(tmp_path / "best.json")])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # as wrapped at the console's width, joined
    assert "judging up to 2 candidates at once" in said
    assert f"judged on ray:{RAY_HOST}" in said, result.output
    assert "judged 2 candidates" in said
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["definition"] == "rmsnorm_small"


class _InstantRunner(base.TaskRunner):
    """A runner whose units end at once, each taking `unit_s` on a clock the test moves."""

    def __init__(self, clock: list[float], unit_s: float) -> None:
        super().__init__(base.describe_machine("cpu"), 1, in_flight=1)
        self.clock, self.unit_s, self.started = clock, unit_s, []

    def _start(self, attempt) -> None:
        self.started.append(attempt)

    def _wait_any(self, timeout):
        self.clock[0] += self.unit_s
        return self.started.pop(0), base.Ended(base.Outcome(), slot="cpu:0",
                                                seconds=self.unit_s)

    def _stop_all(self) -> None:
        self.started.clear()


def test_a_runner_starts_no_unit_that_could_not_end_before_its_deadline(monkeypatch):
    """The first unit starts (nothing is known of a unit's length yet); once it took 10 s,
    a deadline 15 s from the start leaves no room for another: the two waiting are withdrawn,
    never started, and nothing is left pending."""
    clock = [100.0]
    monkeypatch.setattr(base.time, "monotonic", lambda: clock[0])
    runner = _InstantRunner(clock, unit_s=10.0)
    runner.stop_starting_at(115.0)
    tasks = [EvalTask(SMALL, _config(Path("unused")), baseline="eager", key=str(n))
             for n in range(3)]
    for task in tasks:
        runner.submit(task)
    assert runner.next_result().task.key == "0"
    assert runner.pending == 0 and runner.next_result() is None
    assert [task.key for task in runner.withdrawn] == ["1", "2"]

    clock[0], roomy = 100.0, _InstantRunner(clock, unit_s=10.0)
    roomy.stop_starting_at(125.0)  # 100-110 and 110-120 fit before it; 120-130 would not
    for task in tasks:
        roomy.submit(task)
    assert [r.task.key for r in roomy.results()] == ["0", "1"]
    assert [task.key for task in roomy.withdrawn] == ["2"]


def test_the_deadline_rule_forgets_a_long_unit_after_recent_short_ones(monkeypatch):
    """A suite's units come in problem order: one long unit early in a call no longer holds
    back its tail once RECENT_UNITS shorter ones have ended after it."""
    clock = [0.0]
    monkeypatch.setattr(base.time, "monotonic", lambda: clock[0])

    def tasks(count: int, first: int) -> list[EvalTask]:
        return [EvalTask(SMALL, _config(Path("unused")), baseline="eager", key=str(n))
                for n in range(first, first + count)]

    for short_units, started in ((base.RECENT_UNITS, True), (base.RECENT_UNITS - 1, False)):
        clock[0], runner = 0.0, _InstantRunner(clock, unit_s=100.0)
        runner.stop_starting_at(10_000.0)
        runner.submit(tasks(1, 0)[0])
        assert runner.next_result().seconds == 100.0
        runner.unit_s = 5.0
        for task in tasks(short_units, 1):
            runner.submit(task)
        assert len(list(runner.results())) == short_units
        runner.stop_starting_at(clock[0] + 50.0)  # room for a 5 s unit, not a 100 s one
        (last,) = tasks(1, 99)
        runner.submit(last)
        assert [r.task.key for r in runner.results()] == (["99"] if started else [])
        assert runner.withdrawn == ([] if started else [last])


class _StuckRunner(_InstantRunner):
    """Units that never end on their own."""

    def _wait_any(self, timeout):
        return None

    def _stop_all(self) -> None:
        self.stopped = list(self.started)
        self.started.clear()


def test_abandon_stops_the_running_units_and_withdraws_them_with_the_waiting():
    runner = _StuckRunner([0.0], unit_s=1.0)  # one unit in flight at a time
    tasks = [EvalTask(SMALL, _config(Path("unused")), baseline="eager", key=str(n))
             for n in range(3)]
    for task in tasks:
        runner.submit(task)
    assert runner.next_result(timeout=0.0) is None and runner.pending == 3
    runner.abandon()
    assert [task.key for task in runner.withdrawn] == ["0", "1", "2"]  # running, then waiting
    assert [attempt.task.key for attempt in runner.stopped] == ["0"]
    assert runner.pending == 0 and runner.next_result() is None


@pytest.mark.slow
def test_bench_stops_a_unit_still_running_at_its_deadline_and_leaves_it(tmp_path, solutions,
                                                                       monkeypatch):
    """The first unit starts (nothing is known of a unit's length yet) and runs past a 3 s
    deadline: it is stopped, not recorded, and left with the solutions behind it; the run ends
    at its deadline, and the next run measures everything. The unit's process sleeps instead
    of working, so that it is still running at the deadline however long the run's analyses
    take (a unit that ended while they ran is recorded: on a loaded machine it did)."""
    stopped = []
    abandon = base.TaskRunner.abandon

    def spied(runner: base.TaskRunner) -> None:
        stopped.extend(attempt.task.key for attempt in runner._running)
        abandon(runner)

    monkeypatch.setattr(base.TaskRunner, "abandon", spied)
    monkeypatch.setattr(local, "python_command", lambda *args: ["sleep", "60"])
    store = open_store(f"sqlite:///{tmp_path / 'bench.db'}")
    problems = plan_problems([SMALL], find_solutions([solutions]), "cpu")
    config = BenchConfig(device="cpu", baseline="eager", limits=short_limits(),
                         cache_dir=tmp_path / "cache", workers=1, deadline_s=3.0)
    began = time.monotonic()
    outcome = run_bench(problems, store, config)
    assert time.monotonic() - began < 3.0 + local.STOP_GRACE_S + 5.0
    assert stopped == [f"{SMALL}:reference:eager"]  # started, then stopped at the deadline
    assert (outcome.measured, outcome.left) == (0, 3) and not outcome.failures
    with store.session() as s:
        assert s.query(TraceRow).count() == 0
    monkeypatch.undo()
    later = run_bench(problems, store, replace(config, deadline_s=None))
    assert later.measured == 3 and later.left == 0 and not later.failures


@pytest.mark.slow
def test_bench_with_a_deadline_leaves_the_units_it_could_not_start(tmp_path, solutions):
    """`bench --time`: a deadline already past starts no unit (the baseline, and the
    solutions held behind it, are left, and the run says so); the next run does them all."""
    store = open_store(f"sqlite:///{tmp_path / 'bench.db'}")
    problems = plan_problems([SMALL], find_solutions([solutions]), "cpu")
    late = BenchConfig(device="cpu", baseline="eager", limits=_driver_killable(),
                       cache_dir=tmp_path / "cache", workers=1, deadline_s=1e-6)
    outcome = run_bench(problems, store, late)
    assert (outcome.measured, outcome.left) == (0, 3) and not outcome.failures
    later = run_bench(problems, store, replace(late, deadline_s=None))
    assert later.measured == 3 and later.left == 0


@pytest.mark.slow
def test_cli_bench_time_that_ran_out_says_so_and_exits_3(tmp_path, solutions):
    result = CliRunner().invoke(app, ["bench", SMALL, "--solutions", str(solutions),
                                      "--device", "cpu", "--time", "0.000001",
                                      "--db", str(tmp_path / "bench.db")])
    assert result.exit_code == 3, result.output
    assert "--time ran out:" in result.output and "not started" in result.output  # a baseline
    # already in this machine's baseline store is read, with no unit: 2 or 3 units are left


def test_a_unit_submitted_first_goes_ahead_of_those_waiting(monkeypatch):
    """bench releases a problem's solutions ahead of the other problems' baselines, so each
    problem ends before the next starts."""
    clock = [0.0]
    monkeypatch.setattr(base.time, "monotonic", lambda: clock[0])
    runner = _InstantRunner(clock, unit_s=1.0)
    config = _config(Path("unused"))
    for key in ("a", "b"):
        runner.submit(EvalTask(SMALL, config, baseline="eager", key=key))
    runner.submit(EvalTask(SMALL, config, baseline="eager", key="c"), first=True)
    assert [result.task.key for result in runner.results()] == ["a", "c", "b"]


def test_spares_per_slot_default_and_override(monkeypatch):
    """A GPU's two spares are shared among its slots unless SOLFORGE_SPARES_AHEAD says how
    many each slot keeps; a count that is not a small whole number is refused, naming it."""
    monkeypatch.delenv(local.SPARES_ENV, raising=False)
    assert [local.spares_per_slot("cuda", n) for n in (1, 2, 3)] == [2, 1, 1]
    assert local.spares_per_slot("cpu", 1) == 1
    monkeypatch.setenv(local.SPARES_ENV, "3")
    assert local.spares_per_slot("cuda", 3) == 3
    monkeypatch.setenv(local.SPARES_ENV, "0")
    assert local.spares_per_slot("cuda", 1) == 0
    for bad in ("two", "-1", "9", "1.5"):
        monkeypatch.setenv(local.SPARES_ENV, bad)
        with pytest.raises(SolforgeError, match="SOLFORGE_SPARES_AHEAD"):
            local.spares_per_slot("cuda", 3)
