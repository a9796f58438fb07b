"""Units sharing one GPU (harness/device_lock.py): correctness rounds side by side, timed loops
alone, writers first; the runner's slots that share a GPU share its lock, and the judge holds
it shared for the rounds and alone for the timed loop."""

from __future__ import annotations

import fcntl
import os
import stat
import threading
import time
from contextlib import contextmanager

import pytest
import torch
from harness_corpus import EXPLOITS, PROBLEMS, load_fixtures, run_fixture, short_limits

from solforge.data.solution import parse_solution
from solforge.data.trace import Status
from solforge.errors import SolforgeError
from solforge.harness import device_lock, phases, protocol
from solforge.harness import judge as judge_module
from solforge.harness.device_lock import DeviceBusy, DeviceLock, all_alone, make_folder
from solforge.harness.evaluate import EvalConfig, evaluate
from solforge.harness.judge import Judge
from solforge.harness.oracle import ReferenceOracle
from solforge.harness.supervisor import worker_env
from solforge.problem import load_problem
from solforge.runners import open_runner
from solforge.runners.local import LocalRunner, gpu_slots

WAIT_S = 0.3  # long enough to see a holder blocked, on a loaded machine too


def _holds(enter, events: list[str], name: str, release: threading.Event) -> threading.Thread:
    """A thread that takes `enter()` (a lock's context manager), notes when it has it, holds it
    until `release`, and notes when it lets go (just before: a note after the release could
    come after the next holder's)."""
    def run() -> None:
        with enter():
            events.append(f"{name} in")
            release.wait(10)
            events.append(f"{name} out")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_lock_records_how_long_it_was_held_in_each_mode(tmp_path):
    lock = DeviceLock(make_folder(tmp_path / "gpu0"))
    with phases.collecting() as log:
        with lock.shared():
            time.sleep(0.02)
        with lock.exclusive():
            time.sleep(0.03)
        with lock.exclusive():
            pass
    table = {t.name: t for t in log.totals()}
    assert 0.02 <= table["held:shared"].seconds < 1.0
    assert table["held:exclusive"].seconds >= 0.03 and table["held:exclusive"].count == 2
    assert table["device_wait"].count == 3
    lock.close()


def _gate_held(folder) -> bool:
    """Whether someone holds the lock's gate: a timed loop waiting for the rounds in flight
    does, until it has the device."""
    fd = os.open(folder / "gate", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # its lock, if it took one, goes with it
    return False


def _until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_rounds_share_the_device_and_a_timed_loop_waits_for_them(tmp_path):
    folder = make_folder(tmp_path / "gpu-0")
    a, b, c = DeviceLock(folder), DeviceLock(folder), DeviceLock(folder)
    events: list[str] = []
    go = threading.Event()
    first = _holds(a.shared, events, "round a", go)
    assert _until(lambda: "round a in" in events)
    second = _holds(b.shared, events, "round b", go)
    assert _until(lambda: "round b in" in events)  # readers side by side
    timed = _holds(c.exclusive, events, "timed c", threading.Event())
    assert _until(lambda: _gate_held(folder))  # the timed loop waits
    time.sleep(WAIT_S)
    assert "timed c in" not in events  # a timed loop never overlaps a round
    go.set()
    for thread in (first, second):
        thread.join(5)
    assert _until(lambda: "timed c in" in events)
    assert events.index("timed c in") > max(events.index("round a out"),
                                            events.index("round b out"))
    timed.join(0)


def test_a_queued_timed_loop_goes_before_later_rounds(tmp_path):
    """Writers first: a round asked for after a timed loop queued waits for that loop, so a
    stream of rounds cannot starve the timing."""
    folder = make_folder(tmp_path / "gpu-0")
    reader, writer, late = DeviceLock(folder), DeviceLock(folder), DeviceLock(folder)
    events: list[str] = []
    first_go, writer_go, late_go = threading.Event(), threading.Event(), threading.Event()
    threads = [_holds(reader.shared, events, "round", first_go)]
    assert _until(lambda: "round in" in events)
    threads.append(_holds(writer.exclusive, events, "timed", writer_go))
    assert _until(lambda: _gate_held(folder))  # the timed loop is queued, behind the round
    threads.append(_holds(late.shared, events, "late round", late_go))
    time.sleep(WAIT_S)
    assert events == ["round in"]  # the late round waits behind the queued timed loop
    first_go.set()
    assert _until(lambda: "timed in" in events)
    time.sleep(WAIT_S)
    assert "late round in" not in events  # not while the loop is timed
    writer_go.set()
    late_go.set()
    for thread in threads:
        thread.join(5)
    assert events.index("late round in") > events.index("timed out")


def test_the_wait_is_told_and_the_descriptors_stay_in_this_process(tmp_path):
    folder = make_folder(tmp_path / "gpu-0")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # beyond the sandbox's uids
    holder, waiter = DeviceLock(folder), DeviceLock(folder)
    assert not os.get_inheritable(waiter._gate) and not os.get_inheritable(waiter._device)
    released, events = threading.Event(), []
    thread = _holds(holder.exclusive, events, "holder", released)
    assert _until(lambda: "holder in" in events)
    threading.Timer(WAIT_S, released.set).start()
    with waiter.shared() as waited:
        assert waited >= WAIT_S * 0.9
    thread.join(5)
    with waiter.exclusive() as waited:
        assert waited < WAIT_S  # nobody holds it now


def test_a_wait_past_the_limit_ends_the_unit_instead_of_hanging(tmp_path):
    folder = make_folder(tmp_path / "gpu-0")
    released, events = threading.Event(), []
    holder = _holds(DeviceLock(folder).exclusive, events, "stuck", released)
    assert _until(lambda: "stuck in" in events)
    began = time.monotonic()
    with pytest.raises(DeviceBusy, match=r"stayed held for 0\.2 s"), \
            DeviceLock(folder, limit_s=0.2).shared():
        pass
    assert 0.2 <= time.monotonic() - began < 5.0
    assert not _gate_held(folder)  # the gate given back on the way out
    released.set()
    holder.join(5)


def test_all_alone_keeps_every_gpu_from_its_units(tmp_path):
    folders = [make_folder(tmp_path / f"gpu-{i}") for i in range(2)]
    events: list[str] = []
    released = threading.Event()
    holder = _holds(lambda: all_alone(folders), events, "profiler", released)
    assert _until(lambda: "profiler in" in events)
    rounds = [_holds(DeviceLock(f).shared, events, f"round {i}", threading.Event())
              for i, f in enumerate(folders)]
    time.sleep(WAIT_S)
    assert events == ["profiler in"]
    released.set()
    holder.join(5)
    assert _until(lambda: {"round 0 in", "round 1 in"} <= set(events))
    for thread in rounds:
        thread.join(0)


def test_the_process_lock_comes_from_the_runner_environment(tmp_path, monkeypatch):
    device_lock.current.cache_clear()
    monkeypatch.delenv(device_lock.ENV, raising=False)
    assert isinstance(device_lock.current(), device_lock.NoLock)
    device_lock.current.cache_clear()
    monkeypatch.setenv(device_lock.ENV, str(make_folder(tmp_path / "gpu-0")))
    try:
        lock = device_lock.current()
        assert isinstance(lock, DeviceLock) and lock.folder == tmp_path / "gpu-0"
        lock.close()
        assert device_lock.ENV not in worker_env("cpu")  # the driver's alone
    finally:
        device_lock.current.cache_clear()


def test_slots_that_share_a_gpu_share_its_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cuda = torch.device("cuda")
    alone = gpu_slots(cuda, None)
    assert [s.name for s in alone] == ["cuda:0", "cuda:1"]
    assert all(device_lock.ENV not in s.env for s in alone)
    shared = gpu_slots(cuda, None, per_gpu=2, locks=tmp_path)
    assert [s.name for s in shared] == ["cuda:0#1", "cuda:1#1", "cuda:0#2", "cuda:1#2"]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in shared] == ["0", "1", "0", "1"]
    folders = [s.env[device_lock.ENV] for s in shared]
    assert folders[0] == folders[2] != folders[1] == folders[3]
    assert [s.name for s in gpu_slots(cuda, 3, per_gpu=2, locks=tmp_path)] == [
        "cuda:0#1", "cuda:1#1", "cuda:0#2"]  # spread over the GPUs first
    with pytest.raises(SolforgeError, match="--workers 5: only 2 GPU"):
        gpu_slots(cuda, 5, per_gpu=2, locks=tmp_path)
    with pytest.raises(SolforgeError, match="--per-gpu 9"):
        gpu_slots(cuda, None, per_gpu=9, locks=tmp_path)


def test_per_gpu_is_refused_where_no_gpu_is_shared():
    with pytest.raises(SolforgeError, match="--per-gpu 2 is for GPUs"):
        LocalRunner("cpu", 1, per_gpu=2)
    with pytest.raises(SolforgeError, match="--per-gpu is for --runner local"):
        open_runner("ray", "cpu", per_gpu=2)


class _Recorder:
    """A device lock that notes what the judge does under it, and reports a long wait."""

    def __init__(self, waited_s: float) -> None:
        self.held: str | None = None
        self.waited_s = waited_s
        self.order: list[str] = []

    @contextmanager
    def _hold(self, kind: str):
        assert self.held is None, "the judge asked for the device while holding it"
        self.held = kind
        self.order.append(kind)
        try:
            yield self.waited_s
        finally:
            self.held = None

    def shared(self):
        return self._hold("shared")

    def exclusive(self):
        return self._hold("exclusive")


RMSNORM = ("import torch\n\ndef run(hidden_states, norm_weight, eps):\n"
           "    x = hidden_states.float()\n"
           "    y = (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)).bfloat16()\n"
           "    return norm_weight * y\n")


def test_the_judge_runs_rounds_shared_and_the_timed_loop_alone(tmp_path, monkeypatch):
    """Every round's inputs and every warm-up call's leave the driver under the shared lock,
    every timed call's under the exclusive one, and the time waited for the lock is added to
    the workload's limit. The driver's own device work is kept out of the exclusive loop where
    it fits: the timed calls' inputs are made before it, and the chosen timed outputs compared
    after it."""
    recorder = _Recorder(waited_s=1000.0)
    monkeypatch.setattr(device_lock, "current", lambda: recorder)
    seen: list[tuple[str, str | None, float]] = []
    hand_over = Judge._hand_over

    def noted(judge, phase, index, seed):
        timed = phase == protocol.CALL_PHASE and index >= judge.plan.warmup
        seen.append(("timed" if timed else phase, recorder.held,
                     judge.deadline - time.monotonic()))
        return hand_over(judge, phase, index, seed)

    monkeypatch.setattr(Judge, "_hand_over", noted)
    made: list[str | None] = []  # the lock held as each seed's inputs were made
    compared: list[str | None] = []
    make_inputs, compare = ReferenceOracle.inputs, Judge._compare

    def making(oracle, workload, seed):
        if (workload.uuid, seed) not in oracle._inputs:
            made.append(recorder.held)
        return make_inputs(oracle, workload, seed)

    def comparing(judge, values, seed):
        compared.append(recorder.held)
        return compare(judge, values, seed)

    monkeypatch.setattr(ReferenceOracle, "inputs", making)
    monkeypatch.setattr(Judge, "_compare", comparing)
    problem = load_problem(PROBLEMS / "rmsnorm_small")
    solution = parse_solution({
        "name": "test", "definition": "rmsnorm_small", "author": "tests",
        "spec": {"languages": ["pytorch"], "entry_point": "kernel.py::run",
                 "destination_passing_style": False},
        "sources": [{"path": "kernel.py", "content": RMSNORM}]})
    config = EvalConfig(device="cpu", baseline="eager", secret=99, smallest=1,
                        limits=short_limits(), cache_dir=tmp_path)
    traces = evaluate(problem, solution, config)
    assert [t.evaluation.status for t in traces] == [Status.PASSED]
    rounds = [s for s in seen if s[0] == protocol.ROUND_PHASE]
    warm_up = [s for s in seen if s[0] == protocol.CALL_PHASE]
    calls = [s for s in seen if s[0] == "timed"]
    assert rounds and warm_up and calls
    assert {held for _, held, _ in rounds + warm_up} == {"shared"}
    assert {held for _, held, _ in calls} == {"exclusive"}
    # each workload judged (the candidate's, the eager baseline's): its rounds, the timed
    # calls' inputs and the warm-up, its timed calls, the chosen outputs compared
    assert recorder.order == ["shared", "shared", "exclusive", "shared"] * (
        len(recorder.order) // 4)
    assert min(left for _, _, left in rounds) > 1000.0  # the wait for the rounds was added
    assert min(left for _, _, left in calls) > 3000.0  # and the ones before the timed loop
    assert made.count("shared") > len(rounds) and "exclusive" not in made
    assert len(compared) > len(rounds) and set(compared) == {"shared"}


@pytest.mark.parametrize("held_bytes", [0, 30_000, 1 << 30])  # none, 3 of 8.7 KB, all
def test_chosen_timed_outputs_are_judged_in_call_order_however_many_are_kept(
        held_bytes, tmp_path, monkeypatch):
    """The chosen timed outputs compared after the loop (all kept), as they arrive (none), or
    some of each (a budget of a few outputs): the verdict names the first wrong call either
    way. The fixture answers the first timed call with its last round's result."""
    monkeypatch.setattr(judge_module, "HELD_BYTES", held_bytes)
    fixture = next(f for f in load_fixtures(EXPLOITS) if f.name == "skip_when_timed")
    base = EvalConfig(device="cpu", baseline="eager", secret=7, limits=short_limits(),
                      cache_dir=tmp_path)
    traces = run_fixture(fixture, base)
    assert [t.evaluation.status for t in traces] == [Status.REWARD_HACK]
    assert "call 0 of the timed loop" in traces[0].evaluation.log
