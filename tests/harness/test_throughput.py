"""Evaluation throughput: phase timing, pre-spawned workers, the adaptive stopping rule and the
signed baseline store (CPU; the GPU numbers come from benchmarks/throughput_gpu.py)."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import random
import shutil
import time
from dataclasses import replace

import pytest
import torch
from harness_corpus import HONEST, PROBLEMS, short_limits
from typer.testing import CliRunner

from solforge.cli import app
from solforge.data.solution import load_solution
from solforge.data.trace import Status
from solforge.data.workload import InputSource
from solforge.errors import SolforgeError
from solforge.harness import phases, protocol
from solforge.harness.baseline import (
    BaselineCache,
    cache_key,
    export_baselines,
    import_baselines,
    signing_key,
)
from solforge.harness.channel import Frame
from solforge.harness.evaluate import EvalConfig, EvaluationRun, evaluate
from solforge.harness.judge import reproducible_inputs
from solforge.harness.memory import SPARE_BYTES, return_spare_memory
from solforge.harness.oracle import ReferenceOracle, same_bits, tensor_bytes
from solforge.harness.pool import WorkerPool, shared_pool
from solforge.harness.protocol import WorkerConfig
from solforge.harness.startup import waited_steps
from solforge.harness.supervisor import retain_bytes, worker_env
from solforge.harness.worker import Worker
from solforge.measure import timing as timing_module
from solforge.measure.timing import (
    StopRule,
    enough_iterations,
    median_halfwidth,
    time_iterations,
)
from solforge.problem import load_problem
from solforge.problem.inputs import make_inputs
from solforge.runners.base import EvalTask
from solforge.runners.unit import prepare_like

SMALL = PROBLEMS / "rmsnorm_small"
KEY = bytes(range(32))


# -- phases ------------------------------------------------------------------------------------

def test_phases_are_exclusive_grouped_and_switched():
    with phases.collecting() as log:
        began = time.perf_counter()
        with phases.phase("outer"):
            time.sleep(0.02)
            with phases.phase("inner"):
                time.sleep(0.03)
            phases.record("elsewhere", 0.01)
        outer_wall = time.perf_counter() - began
        with phases.phase("compile", group=True):
            phases.switch("timing")
            time.sleep(0.01)
            phases.switch(None)
    table = {t.name: t for t in log.totals()}
    inner, outer = table["inner"].seconds, table["outer"].seconds
    assert 0.03 <= inner < outer_wall
    # outer's own time leaves out its child and the time recorded from another process: at
    # least its own sleep less that record, and the three together within the block's wall
    # time (bounds that a loaded machine, stretching every sleep, cannot break)
    assert outer >= 0.02 - 0.01 - 1e-3 and outer + inner + 0.01 <= outer_wall + 1e-3
    assert table["elsewhere"].seconds == pytest.approx(0.01)
    assert table["compile/timing"].seconds >= 0.01 and "timing" not in table
    merged = phases.merge([phases.as_dict(log.totals())] * 2)
    assert merged["inner"]["count"] == 2
    assert "inner" in phases.format_table(merged, per=2)


def test_a_worker_account_is_carved_out_of_the_phase_it_describes():
    """The worker's loop parts move time out of `timing` (in a group too), never more than it
    holds: the table still adds up to the wall time."""
    with phases.collecting() as log:
        log.add("timing", 1.0)
        phases.carve("timing", "loop_calls", 0.25)
        phases.carve("timing", "loop_receive", 5.0)  # more than is left: only what is left
        with phases.phase("eager", group=True):
            log.add("eager/timing", 0.5)
            phases.carve("timing", "loop_calls", 0.5)
    table = {t.name: t.seconds for t in log.totals()}
    assert table["timing"] == 0.0 and table["loop_calls"] == 0.25
    assert table["loop_receive"] == pytest.approx(0.75)
    assert table["eager/timing"] == 0.0 and table["eager/loop_calls"] == 0.5
    assert sum(v for k, v in table.items() if k != "eager") == pytest.approx(1.5)
    with phases.collecting() as log:
        phases.record("correctness", 1.0)
        phases.carve_all("correctness", {"round_checks": 1.5, "round_calls": 0.5})
    table = {t.name: t.seconds for t in log.totals()}  # 2 s told of 1 held: halved, none lost
    assert table["round_checks"] == pytest.approx(0.75)
    assert table["round_calls"] == pytest.approx(0.25) and table["correctness"] == 0.0


def test_a_workers_start_is_charged_only_where_the_driver_waited():
    """A pre-spawned worker imported torch before anyone waited: only the steps (or the parts
    of them) inside the driver's wait are its `start_` phases. Malformed marks count nothing."""
    marks = [["interpreter", 1.0], ["harness", 3.0], ["idle", 10.0], ["config", 11.0],
             ["warm_up", 11.5]]
    assert waited_steps(marks, 0.0, (5.0, 12.0)) == {"idle": 5.0, "config": 1.0, "warm_up": 0.5}
    assert waited_steps(marks, 0.0, (0.0, 2.0)) == {"interpreter": 1.0, "harness": 1.0}
    assert waited_steps([["torch", "soon"]], 0.0, (0.0, 9.0)) == {}
    assert waited_steps("torch", 0.0, (0.0, 9.0)) == {}
    assert waited_steps([["x" * 500, 1.0]], 0.0, (0.0, 9.0)) == {}  # rewritten by a candidate
    assert waited_steps([[f"s{i}", i / 100] for i in range(17)], 0.0, (0.0, 9.0)) == {}


def test_held_totals_overlap_the_phases_and_stay_out_of_their_sum():
    """The lock's held seconds run under other phases: counted apart (grouped like them), never
    taken out of the phase they ran in, and left out of the table's shares."""
    with phases.collecting() as log:
        with phases.phase("timing"):
            time.sleep(0.02)
            phases.held("exclusive", 0.02)
        with phases.phase("eager", group=True):
            phases.held("shared", 0.5)
    table = {t.name: t.seconds for t in log.totals()}
    assert table["timing"] >= 0.02  # nothing carved out of it
    assert table["held:exclusive"] == 0.02 and table["eager/held:shared"] == 0.5
    assert phases.is_held("eager/held:shared") and not phases.is_held("held_by_me")
    text = phases.format_table(phases.merge([phases.as_dict(log.totals())]))
    timing_line = next(line for line in text.splitlines() if line.startswith("timing"))
    assert timing_line.split()[2] == "100.0%"  # the held totals are not in the sum
    assert text.splitlines()[-1].startswith(("held:", "eager/held:"))  # listed after


def test_phases_cost_nothing_without_a_log():
    with phases.phase("anything"):
        phases.switch("x")
        phases.record("y", 1.0)  # no log: nothing happens, nothing raises


# -- the stopping rule -------------------------------------------------------------------------

def test_median_halfwidth_shrinks_with_samples_and_noise():
    rng = random.Random(0)
    steady = [1.0 + rng.gauss(0, 0.001) for _ in range(20)]
    noisy = [1.0 + abs(rng.gauss(0, 0.3)) for _ in range(20)]
    assert median_halfwidth(steady) < 0.01 < median_halfwidth(noisy)
    rule = StopRule(min_iterations=20, rel_halfwidth=0.01)
    assert not enough_iterations(steady[:19], rule, cap=100)  # never under the minimum
    assert enough_iterations(steady, rule, cap=100)
    assert not enough_iterations(noisy, rule, cap=100)
    assert enough_iterations(noisy, rule, cap=20)  # the cap ends it


class _FakeClock:
    """A host clock that only moves when a timed call says so: the stopping rule is tested on
    exact durations, not on how busy the machine running the tests is."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


def test_timing_stops_once_the_median_is_known(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr("solforge.measure.timing.time", clock)
    calls: list[int] = []
    rule = StopRule(min_iterations=20, chunk=5)
    steady = time_iterations(lambda i: clock.spend(0.005 * (1 + 1e-4 * (i % 3))), iterations=60,
                             warmup=2, method="cpu", before_iteration=calls.append, stop=rule)
    assert len(steady.times_ms) == 20  # known to 1% after the minimum
    assert calls == list(range(2 + len(steady.times_ms)))  # every call has its own index
    rng = random.Random(1)
    noisy = time_iterations(lambda i: clock.spend(rng.choice((0.0005, 0.004))), iterations=30,
                            warmup=0, method="cpu", stop=rule)
    assert len(noisy.times_ms) == 30  # never known to 1%: stopped at the cap
    slow_start = time_iterations(lambda i: clock.spend(0.0015 if i < 8 else 0.001),
                                 iterations=60, warmup=0, method="cpu", stop=rule)
    assert len(slow_start.times_ms) == 30  # 8 slow calls: two more chunks of 5 to know it
    fixed = time_iterations(lambda i: None, iterations=7, warmup=1, method="cpu")
    assert len(fixed.times_ms) == 7


def test_a_loops_flush_buffer_is_made_once_for_all_its_chunks(monkeypatch):
    """The flush buffer and the clock reader serve every chunk of one loop (on the GPU the
    reader's NVML start and a buffer of twice the L2 are not per-chunk costs)."""
    made: list[int] = []
    flushed: list[int] = []
    real, flush = timing_module._flush_buffer, timing_module._flush
    monkeypatch.setattr(timing_module, "_flush_buffer",
                        lambda nbytes, device: made.append(nbytes) or real(nbytes, device))
    monkeypatch.setattr(timing_module, "_flush",
                        lambda buffer, i: flushed.append(i) or flush(buffer, i))
    rng = random.Random(2)
    noisy = time_iterations(lambda i: time.sleep(rng.choice((0.0, 0.002))), iterations=40,
                            warmup=1, method="cpu", flush_bytes=64,
                            stop=StopRule(min_iterations=10, chunk=10))
    assert len(noisy.times_ms) > 10  # more than one chunk ran
    assert made == [64]
    # its flushes numbered on over the chunks: none writes the value the one before it wrote
    assert flushed == list(range(1 + len(noisy.times_ms)))


# -- the signed baseline store -----------------------------------------------------------------

def test_baseline_store_ignores_unsigned_and_tampered_lines(tmp_path):
    store = BaselineCache(tmp_path / "baselines.jsonl", KEY)
    store.put("k1", {"definition": "p", "workload": "w", "kind": "eager"}, 2.5)
    assert store.get("k1") == 2.5
    with store.path.open("a") as out:  # a worker with the file but not the key
        out.write(json.dumps({"key": "k1", "median_ms": 99.0}) + "\n")
        forged = json.loads(store.path.read_text().splitlines()[0])
        out.write(json.dumps({**forged, "median_ms": 50.0}) + "\n")
    assert store.get("k1") == 2.5
    assert BaselineCache(store.path, bytes(32)).get("k1") is None  # another key
    assert store.get("missing") is None


def test_a_key_created_by_another_process_meanwhile_is_the_one_read(tmp_path, monkeypatch):
    """Several units starting at once on a fresh machine: one finds no key, and another
    process's key is in place before it writes its own. It reads that key: no error that the
    file exists, no second key, no draft left behind."""
    path = tmp_path / "config" / "baseline.key"
    theirs = signing_key(path)  # the other process, first
    monkeypatch.setattr(type(path), "is_file", lambda self: False)  # our check came before
    assert signing_key(path) == theirs
    assert [p.name for p in path.parent.iterdir()] == ["baseline.key"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_changed_reference_gets_another_baseline_key(tmp_path):
    """The key covers the reference's source: a rewritten reference is timed again, never
    served the old one's times."""
    folder = tmp_path / "rewritten"
    shutil.copytree(SMALL, folder)
    problem = load_problem(SMALL)
    workload = problem.workloads[0]
    key, description = cache_key(problem, workload, "eager", {"hardware": "h"})
    assert cache_key(load_problem(folder), workload, "eager", {"hardware": "h"})[0] == key
    definition = json.loads((folder / "definition.json").read_text())
    definition["reference"] += "\n# rewritten\n"
    (folder / "definition.json").write_text(json.dumps(definition))
    assert cache_key(load_problem(folder), workload, "eager", {"hardware": "h"})[0] != key
    assert cache_key(problem, workload, "compile", {"hardware": "h"})[0] != key
    assert description["definition"] == problem.name


def test_baselines_export_and_import_resign_for_another_machine(tmp_path):
    source = BaselineCache(tmp_path / "a.jsonl", KEY)
    source.put("k1", {"definition": "p", "workload": "w1", "kind": "eager"}, 1.0)
    source.put("k2", {"definition": "p", "workload": "w2", "kind": "compile"}, 0.5)
    exported = tmp_path / "h200-baselines.json"
    assert export_baselines(source, exported) == 2
    assert "mac" not in exported.read_text()
    target = BaselineCache(tmp_path / "b.jsonl", bytes(32))
    assert import_baselines(target, exported) == 2
    assert import_baselines(target, exported) == 0  # already there
    assert target.get("k2") == 0.5
    other = BaselineCache(tmp_path / "c.jsonl", KEY)  # a second store: both go into one file
    other.put("k3", {"definition": "q", "workload": "w1", "kind": "eager"}, 2.0)
    assert export_baselines([source, other], exported) == 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "solforge-baselines/1",
                               "baselines": [{"key": "x", "median_ms": -1}]}))
    with pytest.raises(SolforgeError, match=r"baselines\[0\]"):
        import_baselines(target, bad)


# -- pre-spawned workers -----------------------------------------------------------------------

def test_pool_hands_out_a_prepared_worker_once(monkeypatch):
    monkeypatch.delenv("SOLFORGE_WORKER_POOL", raising=False)
    pool = WorkerPool()
    env = worker_env("cpu")
    try:
        pool.prepare(env)
        pool.prepare(env)  # one is already waiting
        assert pool.waiting() == 1
        taken = pool.take(env)
        assert taken.process.poll() is None and pool.waiting() == 0
        fresh = pool.take(env)  # nothing waiting: a new process
        assert fresh.process.pid != taken.process.pid
        for spawned in (taken, fresh):
            spawned.discard()
            assert spawned.process.poll() is not None
        pool.prepare(env)
        waiting = pool._waiting[next(iter(pool._waiting))][0]
    finally:
        pool.close()
    assert waiting.process.poll() is not None  # closing the pool kills the waiting ones
    monkeypatch.setenv("SOLFORGE_WORKER_POOL", "0")
    pool.prepare(env)
    assert pool.waiting() == 0
    monkeypatch.delenv("SOLFORGE_WORKER_POOL")
    pool = WorkerPool()
    try:  # Inductor sets its cache folder in the driver's environment after the worker started
        pool.prepare(env)
        taken = pool.take({**env, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_x"})
        assert pool.waiting() == 0
        taken.discard()
    finally:
        pool.close()
    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", "/somewhere/key")
    assert "SOLFORGE_BASELINE_KEY" not in worker_env("cpu")  # the key stays the driver's


def test_a_spare_prepares_the_worker_its_next_unit_takes(tmp_path, monkeypatch):
    """A spare unit process prepares its worker like the unit just started on its slot, keyed
    by the same environment and sandbox policy as the one `evaluate` takes: the next candidate
    of that problem starts on it. (Keyed without the policy, as before, it was never taken and
    every candidate waited for a fresh worker.)"""
    monkeypatch.delenv("SOLFORGE_WORKER_POOL", raising=False)
    config = EvalConfig(device="cpu", baseline="eager", limits=short_limits(),
                        cache_dir=tmp_path / "cache")
    like = tmp_path / "1.task"
    like.write_bytes(pickle.dumps(EvalTask(str(SMALL), config, baseline="eager")))
    pool = shared_pool()
    before = pool.waiting()
    assert prepare_like(like)
    assert pool.waiting() == before + 1
    supervisor = EvaluationRun(load_problem(SMALL), config).supervisor
    taken = pool.take(supervisor._env(), None, supervisor.sandbox_policy())
    try:
        assert pool.waiting() == before  # the prepared one, not a fresh process
    finally:
        taken.discard()
    assert not prepare_like(tmp_path / "gone.task")  # the unit ended first: nothing prepared


@pytest.mark.slow
def test_evaluation_records_its_phases_and_times_adaptively(tmp_path, monkeypatch):
    """End to end on the CPU: a prepared worker serves the candidate, the timed loop stops
    between its minimum and its cap, the baseline is stored signed, and the phases of the
    evaluation add up to most of its wall time."""
    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", str(tmp_path / "key"))
    solution = load_solution(HONEST / "pytorch_rmsnorm" / "solution.py", "rmsnorm_small")
    config = EvalConfig(device="cpu", baseline="eager", secret=5, smallest=1,
                        limits=short_limits(), cache_dir=tmp_path / "cache", iterations=40,
                        min_iterations=20)
    began = time.perf_counter()
    with phases.collecting() as log:
        [trace] = evaluate(load_problem(SMALL), solution, config)
    wall = time.perf_counter() - began
    assert trace.status is Status.PASSED, trace.evaluation.log
    assert 20 <= trace.evaluation.timing.iterations <= 40
    table = {t.name: t.seconds for t in log.totals()}
    for name in ("build", "worker_wait", "correctness", "reference", "timing", "verify",
                 "eager/worker_wait", "eager/timing", "baseline_store", "worker_close",
                 "send_inputs", "take_outputs", "compare", "eager/compare"):
        assert name in table, sorted(table)
    for part in ("receive", "checks", "calls", "hand_over"):  # the worker's own account
        assert table[f"round_{part}"] > 0 and table[f"loop_{part}"] > 0, sorted(table)
    assert table["start_warm_up"] > 0 and "start_config" in table, sorted(table)  # after take
    # The driver makes the candidate's inputs and hands them over; the baseline's worker is
    # sent the seeds and makes its own (the driver makes them only to compute the reference).
    assert "inputs" in table and "eager/inputs" not in table, sorted(table)
    # Nothing was compiled ahead for this candidate: its sandboxed worker counts as one that
    # found none; a baseline's worker never looks.
    sandboxed = "uid" in trace.evaluation.environment.sandbox
    assert ("triton_ahead_none" in table) == sandboxed, sorted(table)
    assert not any(name.endswith("triton_ahead") or name.startswith("eager/triton")
                   for name in table), sorted(table)
    assert 0.5 * wall < sum(table.values()) <= wall * 1.01
    assert os.stat(tmp_path / "key").st_mode & 0o777 == 0o600
    out = tmp_path / "exported.json"
    result = CliRunner().invoke(app, ["baselines", "export", str(out), "--cache-dir",
                                      str(tmp_path / "cache")])
    assert result.exit_code == 0 and "exported 1 baselines" in result.output
    assert json.loads(out.read_text())["baselines"][0]["kind"] == "eager"


def test_only_inputs_another_process_makes_bit_for_bit_go_as_a_seed():
    """A baseline's worker makes its inputs from the seed unless a custom generator makes them
    (it may draw from anything): those are handed over as before."""
    problem = load_problem(SMALL)
    workload = problem.workloads[0]
    assert reproducible_inputs(workload)
    custom = replace(workload, inputs={**workload.inputs, "x": InputSource("custom")})
    assert not reproducible_inputs(custom)


# Unseeded: one Python draw per element. A single draw broadcast (tried first) rounds to the
# same bfloat16 twice about once in 400 runs, and the check rightly calls that repeatable.
SEEDED = "torch.randn(shape)"
UNSEEDED = "torch.tensor([[random.random() for _ in range(shape[1])] for _ in range(shape[0])])"


def _custom_problem(tmp_path, draw: str):
    """rmsnorm_small with hidden_states from a custom generator that draws with `draw`."""
    folder = tmp_path / ("custom_seeded" if draw == SEEDED else "custom_unseeded")
    folder.mkdir()
    definition = json.loads((SMALL / "definition.json").read_text())
    definition["name"] = folder.name
    definition["reference"] += (
        "\n\nimport random\n\n\ndef make_custom(axes, device):\n"
        "    shape = (axes['num_tokens'], axes['hidden_size'])\n"
        f"    values = {draw}\n"
        "    return {'hidden_states': values.to(device=device, dtype=torch.bfloat16)}\n")
    definition["custom_inputs_entrypoint"] = "make_custom"
    (folder / "definition.json").write_text(json.dumps(definition))
    rows = [json.loads(line) for line in (SMALL / "workload.jsonl").read_text().splitlines()]
    for row in rows:
        row["inputs"]["hidden_states"] = {"type": "custom"}
    (folder / "workload.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_problem(folder)


def test_a_custom_generator_goes_as_a_seed_only_if_it_repeats_bit_for_bit(tmp_path):
    """Drawn from torch's seeded generator: the same inputs twice, so a baseline's worker can
    make them. Drawn from Python's unseeded random: handed over, as before."""
    seeded, unseeded = _custom_problem(tmp_path, SEEDED), _custom_problem(tmp_path, UNSEEDED)
    for problem, repeats in ((seeded, True), (unseeded, False)):
        workload = problem.workloads[0]
        assert not reproducible_inputs(workload)
        oracle = ReferenceOracle(problem, torch.device("cpu"))
        assert oracle.repeatable(workload, 11) is repeats
        assert oracle.repeatable(workload, 12) is repeats  # checked once per workload
        kept = oracle.inputs(workload, 11)  # the copy the check made, kept for the reference
        assert oracle.inputs(workload, 11) is kept


def test_a_judged_workload_leaves_no_inputs_in_the_driver(tmp_path):
    """A worker that fails after its round's inputs were made leaves them uncompared: the
    verdict releases them (a MoE block's 22 GB inputs, kept, filled the H200's driver)."""
    from types import SimpleNamespace

    from solforge.harness.judge import Judge, Plan, WorkerFailure

    problem = _custom_problem(tmp_path, SEEDED)
    first, second = problem.workloads[:2]
    oracle = ReferenceOracle(problem, torch.device("cpu"))
    oracle.inputs(second, 5)  # another workload's, still in progress

    class FailingMidway(Judge):
        def _judge(self):
            self.oracle.inputs(self.workload, 1)  # round 0 handed over, then the worker died
            self.oracle.inputs(self.workload, 2)
            raise WorkerFailure({"status": "RUNTIME_ERROR", "message": "out of memory"})

    session = SimpleNamespace(deadline=lambda timeout_s: time.monotonic() + timeout_s)
    plan = Plan(seeds=None, rounds=1, warmup=0, iterations=1, verify=1)
    result = FailingMidway(session, oracle, plan, 10.0).judge(first)
    assert result.status is Status.RUNTIME_ERROR
    assert [key for key in oracle._inputs if key[0] == first.uuid] == []
    assert (second.uuid, 5) in oracle._inputs  # only the judged workload's are dropped


@pytest.mark.parametrize(("reserved_gib", "threshold", "emptied"),
                         [(30, 1 << 30, True), (1, 1 << 30, False), (1, 0, True)])
def test_the_driver_returns_spare_device_memory_past_its_threshold(
        monkeypatch, reserved_gib, threshold, emptied):
    """The driver's reference temporaries (a MoE block's 28 GiB float32 weight copy) go back to
    the GPU once more than the threshold sits cached, so the worker can allocate them."""
    calls = []
    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: (reserved_gib + 2) * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 2 * gib)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    return_spare_memory(torch.device("cuda"), threshold)
    assert calls == (["empty"] if emptied else [])
    return_spare_memory(torch.device("cpu"), 0)  # no CUDA call on the CPU
    assert len(calls) == int(emptied)


def test_the_oracle_returns_spare_memory_after_each_reference(tmp_path, monkeypatch):
    from solforge.harness import oracle as oracle_module

    checked = []
    monkeypatch.setattr(oracle_module, "return_spare_memory",
                        lambda device, spare_bytes=SPARE_BYTES:
                        checked.append(spare_bytes))
    problem = _custom_problem(tmp_path, SEEDED)
    workload = problem.workloads[0]
    oracle = ReferenceOracle(problem, torch.device("cpu"))
    assert oracle.repeatable(workload, 3)
    oracle.expected(workload, 3)
    oracle.release(workload)
    # made (inside the repeatability check), checked, referenced, released
    spare = SPARE_BYTES
    assert checked == [spare, spare, spare, 0]


@pytest.mark.parametrize(("budget_outputs", "kept"), [(100, 4), (2.5, 2), (0.5, 1)])
def test_the_oracle_keeps_the_latest_references_that_fit_its_budget(tmp_path, monkeypatch,
                                                                    budget_outputs, kept):
    """At most four, and no more bytes than the budget (always the latest): four 5 GB
    log-softmax references would hold 20 GB of an 80 GB GPU in the driver."""
    from solforge.harness import oracle as oracle_module

    problem = _custom_problem(tmp_path, SEEDED)
    workload = problem.workloads[0]
    oracle = ReferenceOracle(problem, torch.device("cpu"))
    size = tensor_bytes(oracle.expected(workload, 0))
    monkeypatch.setattr(oracle_module, "_KEPT_BYTES", int(budget_outputs * size))
    first = [oracle.expected(workload, seed) for seed in range(1, 7)]
    assert [key[1] for key in oracle._expected] == list(range(7 - kept, 7))
    assert oracle.expected(workload, 6) is first[-1]  # the latest, not computed again
    again = oracle.expected(workload, 1)  # dropped: computed again, the same values
    assert all(map(same_bits, again, first[0]))


@pytest.mark.parametrize(("budget_outputs", "held"),
                         [(100, [0, 1, 2, 3, 3, 3]), (2.5, [0, 1, 2, 2]), (0.5, [0, 0, 0])])
def test_the_oracle_makes_room_before_a_reference_runs(tmp_path, monkeypatch, budget_outputs,
                                                       held):
    """While a reference runs, the driver holds at most three older ones, within its byte
    budget: one that does not fit is dropped before the next reference runs, not after it (on
    an 80 GB H100 a log-softmax's reference ran out of memory beside its 8 GiB predecessor)."""
    from solforge.harness import oracle as oracle_module

    problem = _custom_problem(tmp_path, SEEDED)
    workload = problem.workloads[0]
    oracle = ReferenceOracle(problem, torch.device("cpu"))
    size = tensor_bytes(oracle.expected(workload, 0))
    oracle._expected.clear()
    monkeypatch.setattr(oracle_module, "_KEPT_BYTES", int(budget_outputs * size))
    run = oracle._run_reference
    seen: list[int] = []

    def counted(*args):
        seen.append(sum(map(tensor_bytes, oracle._expected.values())) // size)
        return run(*args)

    monkeypatch.setattr(oracle, "_run_reference", counted)
    for seed in range(len(held)):
        oracle.expected(workload, seed)
    assert seen == held


@pytest.mark.parametrize(("free_gib", "kept_gib"), [(78, 8), (139, 8), (40, 5)])
def test_a_worker_keeps_at_most_an_eighth_of_the_free_memory_in_timed_inputs(
        monkeypatch, free_gib, kept_gib):
    """Up to 8 GiB: with 16, a log-softmax's worker could keep four of its 4 GiB inputs on an
    80 GB H100, where the driver's reference beside it ran out of memory."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free_gib << 30, 80 << 30))
    assert retain_bytes(torch.device("cuda", 0)) == kept_gib << 30
    assert retain_bytes(torch.device("cpu")) == 512 << 20


def test_same_bits_tells_nan_payloads_signed_zeros_and_dtypes_apart():
    nan = torch.tensor([float("nan")])
    assert same_bits(nan, nan.clone()) and not torch.equal(nan, nan.clone())
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not same_bits(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert same_bits(torch.tensor(1.5), torch.tensor(1.5)) and same_bits(3, 3)
    assert not same_bits(3, 3.0) and not same_bits(torch.zeros(1), 0.0)


@pytest.mark.slow
def test_a_baseline_worker_makes_repeatable_custom_inputs_from_the_seed(tmp_path, monkeypatch):
    """End to end: the seeded custom generator's baseline is sent seeds (the driver makes its
    inputs only for the check) and passes; the unseeded one's are handed over, and it passes."""
    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", str(tmp_path / "key"))
    solution = load_solution(HONEST / "pytorch_rmsnorm" / "solution.py", "rmsnorm_small")
    for draw, handed_over in ((SEEDED, False), (UNSEEDED, True)):
        problem = _custom_problem(tmp_path, draw)
        config = EvalConfig(device="cpu", baseline="eager", secret=5, smallest=1,
                            limits=short_limits(), cache_dir=tmp_path / "cache", iterations=20)
        with phases.collecting() as log:
            [trace] = evaluate(problem, replace(solution, definition=problem.definition.name),
                               config)
        made = {t.name: t.count for t in log.totals()}.get("eager/inputs", 0)
        assert trace.status is Status.PASSED, trace.evaluation.log
        assert trace.evaluation.performance.reference_latency_ms is not None
        # the check makes one workload's inputs (twice, in one phase); handed over: every call
        assert (made > 10) if handed_over else (made == 1), (draw, made)


class _OneFrame:
    """A worker's link that delivers one INPUTS frame."""

    def __init__(self, meta: dict) -> None:
        self.frame = Frame(protocol.INPUTS, meta)

    def receive(self, *kinds: str) -> Frame:
        return self.frame


def test_a_baseline_worker_makes_its_inputs_from_the_seed_and_a_candidate_refuses_one(
        monkeypatch):
    from solforge.harness import worker as worker_module

    returned = []
    monkeypatch.setattr(worker_module, "return_spare_memory", returned.append)
    problem = load_problem(SMALL)
    workload = problem.workloads[0]
    meta = {"workload": workload.uuid, "phase": protocol.CALL_PHASE, "index": 3, "seed": 77}

    def worker(role: str) -> Worker:
        config = WorkerConfig("", role, str(SMALL), "cpu", None, None, None, None, None, False,
                              (), "cpu", 0, 1, None, 0)
        return Worker(config, _OneFrame(meta))

    made = worker(protocol.REFERENCE_EAGER).receive_inputs(workload, protocol.CALL_PHASE, 3)
    expected = list(make_inputs(problem, workload, "cpu", 77).values())
    assert len(made) == len(expected)
    for mine, theirs in zip(made, expected):
        assert torch.equal(mine, theirs) if isinstance(theirs, torch.Tensor) else mine == theirs
    assert returned == [torch.device("cpu")]  # the generator's draws go back to the GPU
    with pytest.raises(RuntimeError, match="a candidate's worker was sent a seed"):
        worker(protocol.CANDIDATE).receive_inputs(workload, protocol.CALL_PHASE, 3)


@pytest.mark.slow
def test_speed_of_light_is_analysed_once_and_kept_signed(tmp_path, monkeypatch):
    evaluate_module = importlib.import_module("solforge.harness.evaluate")
    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", str(tmp_path / "key"))
    problem = load_problem(SMALL)
    config = EvalConfig(device="cpu", hardware="H200", cache_dir=tmp_path / "cache")
    workload = problem.workloads[0]
    first = evaluate_module.EvaluationRun(problem, config).speed_of_light(workload)
    assert first.t_sol_ms > 0

    def no_analysis(*args):
        raise AssertionError("analysed again")

    monkeypatch.setattr(evaluate_module, "speed_of_light", no_analysis)
    again = evaluate_module.EvaluationRun(problem, config).speed_of_light(workload)
    assert again == first
    store = tmp_path / "cache" / "sol.jsonl"
    store.write_text(store.read_text().replace(f'"floor_ms": {first.floor_ms}',
                                               '"floor_ms": 0.0'))  # a lowered floor
    with pytest.raises(AssertionError, match="analysed again"):
        evaluate_module.EvaluationRun(problem, config).speed_of_light(workload)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["kernel", "events", "graph"])
def test_adaptive_timing_on_the_gpu(method):
    """Chunks of the timed loop (a profiler session each for "kernel") join into one timing."""
    data = torch.randn(1 << 22, device="cuda")
    seen: list[int] = []
    timing = time_iterations(lambda i: data.mul_(1.0), iterations=100, warmup=5, method=method,
                             before_iteration=seen.append, stop=StopRule())
    assert 20 <= len(timing.times_ms) <= 100
    assert seen == list(range(5 + len(timing.times_ms)))
    if method == "kernel":
        assert timing.kernels_per_iteration == pytest.approx(1.0)
    assert timing.sm_clock_mhz is None or timing.sm_clock_mhz[0] > 0


def test_a_screened_candidate_is_timed_briefly_and_its_baseline_in_full(tmp_path, monkeypatch):
    """`screen` (the optimizer's racing) shortens the candidate's timed loop only, says so in
    the trace, and keeps the baseline's plan: a full evaluation afterwards reuses the baseline
    the screened one timed (same key), and times the candidate in full."""
    from solforge.harness.evaluate import DEFAULTS, SCREEN

    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", str(tmp_path / "key"))
    solution = load_solution(HONEST / "pytorch_rmsnorm" / "solution.py", "rmsnorm_small")
    config = EvalConfig(device="cpu", baseline="eager", secret=5, smallest=1,
                        limits=short_limits(), cache_dir=tmp_path / "cache", screen=True)
    [brief] = evaluate(load_problem(SMALL), solution, config)
    assert brief.status is Status.PASSED, brief.evaluation.log
    warmup, most, _ = SCREEN["cpu"]
    timing = brief.evaluation.timing
    assert (timing.warmup, timing.iterations) == (warmup, most)
    assert "screened" in timing.label and not brief.evaluation.baseline.cached
    [full] = evaluate(load_problem(SMALL), solution, replace(config, screen=False))
    _, full_warmup, full_most, _ = DEFAULTS["cpu"]
    assert (full.evaluation.timing.warmup, full.evaluation.timing.iterations) == (
        full_warmup, full_most)
    assert "screened" not in full.evaluation.timing.label
    assert full.evaluation.baseline.cached  # the screened run's baseline, same key
    assert full.evaluation.baseline.latency_ms == brief.evaluation.baseline.latency_ms


def test_a_reference_out_of_memory_says_what_the_oracle_held(tmp_path, monkeypatch):
    """The INVALID_REFERENCE of a reference that ran out of device memory counts the oracle's
    own tensors in the driver: which of the driver's bytes it holds, and which it does not."""
    from solforge.harness.oracle import ReferenceFailure

    problem = _custom_problem(tmp_path, SEEDED)
    workload = problem.workloads[0]
    oracle = ReferenceOracle(problem, torch.device("cpu"))
    oracle.expected(workload, 0)  # one reference kept
    oracle.inputs(workload, 2)  # another seed's inputs kept

    def out_of_memory(*inputs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB.")

    monkeypatch.setattr(oracle.module, "run", out_of_memory)
    oracle.inputs(workload, 1)
    with pytest.raises(ReferenceFailure) as failure:
        oracle.expected(workload, 1)
    message = str(failure.value)
    assert message.startswith("reference raised OutOfMemoryError")
    assert "1 other seeds' inputs" in message and "1 references" in message


def _takes_and_references(tmp_path, monkeypatch, rounds: int) -> list[str]:
    """In order, each reference the driver computes and each output it takes (a candidate's
    timed call's marked as such), over an honest candidate's evaluation with `rounds` rounds."""
    from solforge.harness.judge import Judge

    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", str(tmp_path / "key"))
    events: list[str] = []
    taken, run = Judge._taken, ReferenceOracle._run_reference

    def taking(self, frame):
        timed = self.candidate and frame.kind == protocol.CALL_OUTPUT
        events.append("take a timed call's" if timed else "take")
        return taken(self, frame)

    def referencing(self, workload, inputs):
        events.append("reference")
        return run(self, workload, inputs)

    monkeypatch.setattr(Judge, "_taken", taking)
    monkeypatch.setattr(ReferenceOracle, "_run_reference", referencing)
    solution = load_solution(HONEST / "pytorch_rmsnorm" / "solution.py", "rmsnorm_small")
    config = EvalConfig(device="cpu", baseline="eager", secret=5, smallest=1, rounds=rounds,
                        limits=short_limits(), cache_dir=tmp_path / "cache", screen=True)
    [trace] = evaluate(load_problem(SMALL), solution, config)
    assert trace.status is Status.PASSED, trace.evaluation.log
    return events


def test_a_rounds_reference_is_computed_before_its_outputs_are_taken(tmp_path, monkeypatch):
    """The driver computes each round's reference while the worker runs the call, so the
    reference's temporaries never sit beside the candidate's outputs taken for comparison (a
    log-softmax's 8 GiB float32 copy ran out of memory beside its 8 GiB of outputs on an 80 GB
    H100); once per seed: the comparison reuses it."""
    events = _takes_and_references(tmp_path, monkeypatch, rounds=3)
    assert events[:6] == ["reference", "take"] * 3  # the candidate's three rounds


def test_a_timed_calls_reference_comes_before_its_outputs_when_they_cannot_be_kept(
        tmp_path, monkeypatch):
    """A secretly chosen timed output too large to keep for after the loop (HELD_BYTES) is
    compared as it arrives: its reference is computed before the outputs are taken, as a
    round's is, so the reference's temporaries never sit beside them."""
    from solforge.harness import judge

    monkeypatch.setattr(judge, "HELD_BYTES", 0)
    events = _takes_and_references(tmp_path, monkeypatch, rounds=2)
    # each of the candidate's chosen timed calls (a baseline's may find its reference made)
    before = [events[i - 1] for i, event in enumerate(events) if event.endswith("call's")]
    assert before and before == ["reference"] * len(before)


class _Timed:
    """A worker's link whose driver always answers TIME (and takes whatever is sent)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, kind: str, meta: dict, *values) -> None:
        self.sent.append(kind)

    def receive(self, *kinds: str) -> Frame:
        return Frame(protocol.TIME, {})


def test_the_rounds_memory_is_released_before_the_timed_calls(monkeypatch):
    """Once the rounds passed, their inputs, output buffers and the last outputs' copy are
    dropped and the freed blocks go back to the GPU before the timed calls allocate theirs (a
    log-softmax's worker held 46.6 GiB of an 80 GB H100 in its timed loop, and the driver could
    not make a call's inputs)."""
    import weakref

    from solforge.harness import worker as worker_module

    returned: list[torch.device] = []
    monkeypatch.setattr(worker_module, "return_spare_memory", returned.append)
    workload = load_problem(SMALL).workloads[0]
    config = WorkerConfig("", protocol.REFERENCE_EAGER, str(SMALL), "cpu", None, None, None,
                          None, None, False, (), "cpu", 0, 1, None, 0)
    link = _Timed()
    worker = Worker(config, link)
    rounds: list[weakref.ref] = []

    def checked_round(workload, number, previous, buffers, slots):
        inputs = previous or [torch.zeros(8)]
        outputs = torch.ones(8)
        rounds.extend([weakref.ref(inputs[0]), weakref.ref(outputs)])
        worker.handed_over = ([outputs], [outputs.clone()])
        return inputs, None

    class Timed(Exception):
        pass

    def timed(calls):
        assert worker.handed_over is None and returned == [worker.device]
        assert [ref() for ref in rounds] == [None] * len(rounds)
        raise Timed

    monkeypatch.setattr(worker, "_checked_round", checked_round)
    monkeypatch.setattr(worker, "_check_guards", lambda *args, **kwargs: None)
    monkeypatch.setattr(worker, "_time", timed)
    with pytest.raises(Timed):
        worker._evaluate(workload, 3, None)
    assert link.sent == [protocol.ROUNDS_DONE] and len(rounds) == 6
