"""The harness's parts on their own: solutions, traces, the channel, comparison, guards, and
end-to-end verdicts that are not hacks (compile errors, wrong shapes, a broken reference)."""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
import types
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from harness_corpus import HONEST, PROBLEMS, short_limits
from helpers import Computed, selected_keys, side_by_side
from typer.testing import CliRunner

from solforge.cli import app
from solforge.data.solution import SolutionError, load_solution, parse_solution
from solforge.data.trace import (
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Status,
    Trace,
    append_traces,
    read_traces,
)
from solforge.data.workload import Tolerance
from solforge.harness import compare, guards, identities, protocol
from solforge.harness.channel import (
    ChannelClosed,
    ChannelForged,
    ChannelTimeout,
    Frame,
    FrameReader,
    FrameWriter,
)
from solforge.harness.compare import compare_outputs, required_count
from solforge.harness.evaluate import EvalConfig, disqualify, evaluate, select_workloads
from solforge.harness.guards import (
    HookSnapshot,
    ThreadOrigins,
    WorkAfterReturn,
    live_children,
)
from solforge.harness.identities import IdentitySnapshot
from solforge.harness.judge import (
    ForgedTiming,
    Judge,
    Plan,
    WorkloadResult,
    _timed_failure,
    recompute_timing,
)
from solforge.harness.output_log import OutputLog
from solforge.harness.seeds import CALL, ROUND, SeedPlan
from solforge.harness.session import WorkerLost
from solforge.harness.sol import SpeedOfLight, below_floor, score
from solforge.problem import load_problem
from solforge.problem.inputs import pack_fp4

SMALL = PROBLEMS / "rmsnorm_small"
RMSNORM = ("import torch\n\ndef run(hidden_states, norm_weight, eps):\n"
           "    x = hidden_states.float()\n"
           "    y = (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)).bfloat16()\n"
           "    return norm_weight * y\n")


def _solution(source: str, dps: bool = False, language: str = "pytorch",
              path: str = "kernel.py") -> dict:
    return {"name": "test", "definition": "rmsnorm_small", "author": "tests",
            "spec": {"languages": [language], "entry_point": f"{path}::run",
                     "destination_passing_style": dps, "compile_options": {"ld_flags": []}},
            "sources": [{"path": path, "content": source}]}


def _cpu_config(tmp_path: Path, **overrides) -> EvalConfig:
    return replace(EvalConfig(device="cpu", baseline="eager", secret=99, smallest=1,
                              limits=short_limits(), cache_dir=tmp_path), **overrides)


# -- solutions ---------------------------------------------------------------------------------

def test_solution_json_defaults_to_destination_passing():
    data = _solution("def run(x, out): pass")
    del data["spec"]["destination_passing_style"]
    solution = parse_solution(data)
    assert solution.destination_passing_style
    assert solution.entry_point == "kernel.py::run"
    assert not solution.is_cpp


def test_solution_accepts_single_language_field():
    data = _solution("", language="cuda_cpp", path="kernel.cu")
    data["spec"]["language"] = data["spec"].pop("languages")[0]
    assert parse_solution(data).is_cpp


@pytest.mark.parametrize("path", ["/etc/passwd", "../escape.py", "a/../../b.py"])
def test_solution_rejects_paths_outside_its_folder(path):
    with pytest.raises(SolutionError, match="relative path"):
        parse_solution(_solution("", path=path))


def test_solution_rejects_mixed_languages_and_unknown_entry():
    data = _solution("")
    data["spec"]["languages"] = ["triton", "cuda_cpp"]
    with pytest.raises(SolutionError, match="cannot mix"):
        parse_solution(data)
    data = _solution("")
    data["spec"]["entry_point"] = "other.py::run"
    with pytest.raises(SolutionError, match="not one of the sources"):
        parse_solution(data)


def test_python_file_solution_returns_its_outputs(tmp_path):
    file = tmp_path / "mine.py"
    file.write_text("import triton\n\ndef run(x):\n    return x\n")
    solution = load_solution(file, "rmsnorm_small")
    assert not solution.destination_passing_style
    assert solution.languages == ("triton",)
    assert solution.name == "mine" and solution.definition == "rmsnorm_small"


@pytest.mark.parametrize("source", [
    "f = torch.compile(g)", "@torch.compile(dynamic=False)\ndef f(x):\n    return x\n",
    "from torch import compile\n", "import torch._dynamo\n", "import torch._inductor.config\n",
    "torch.compiler.reset()\n", "program = torch.export.export(m, (x,))\n",
    "from torch.nn.attention.flex_attention import flex_attention\n",
    "f = torch.compile(g)  # the trigger is the code, not this comment\n"])
def test_preload_covers_torch_compile(source):
    assert parse_solution(_solution(source)).preload_modules() == ("torch._dynamo",)


@pytest.mark.parametrize(("source", "path", "language"), [
    ("y = x + 1", "kernel.py", "pytorch"),
    ("# compiled for sm_90a; 1.1x torch.compile, torch._dynamo\ny = x + 1\n", "kernel.py",
     "pytorch"),
    ('"""Beats torch.compile and inductor; export-friendly."""\n\ndef run(x):\n'
     '    return x  # no torch.export here\n', "kernel.py", "triton"),
    ("// compiled with nvcc, exported through TVM-FFI\nint f() { return 0; }\n", "k.cu",
     "cuda_cpp")])
def test_no_preload_for_words_in_comments_and_docstrings(source, path, language):
    """The warm-up costs seconds per candidate: a word in a comment or docstring does not pay
    it (every shipped solution mentions torch.compile in its description)."""
    solution = parse_solution(_solution(source, language=language, path=path))
    assert "torch._dynamo" not in solution.preload_modules()


def test_shipped_solutions_need_no_compile_warm_up():
    """None of the shipped solutions calls torch.compile: none pays the warm-up."""
    root = Path(__file__).resolve().parents[2] / "src" / "solforge" / "solutions"
    preloaded = [str(p.relative_to(root)) for p in sorted(root.rglob("*.json"))
                 if "torch._dynamo" in load_solution(p).preload_modules()]
    assert preloaded == []


# -- traces ------------------------------------------------------------------------------------

def _evaluation(**fields) -> Evaluation:
    return Evaluation(environment=Environment("CPU_x86_64", {"torch": "2"}),
                      timestamp="2026-01-01T00:00:00+00:00", **fields)


def test_trace_round_trip_through_jsonl(tmp_path):
    evaluation = _evaluation(status=Status.PASSED, correctness=Correctness(0.1, 0.2),
                             performance=Performance(1.0, 2.0, 2.0), t_sol_ms=0.5,
                             sol_score=0.75, notes=("a note",))
    trace = Trace("d", "s", {"uuid": "w", "axes": {}, "inputs": {}}, evaluation)
    path = tmp_path / "traces.jsonl"
    append_traces(path, [trace])
    append_traces(path, [trace])
    loaded = read_traces(path)
    assert len(loaded) == 2 and loaded[0] == trace
    line = json.loads(path.read_text().splitlines()[0])
    assert line["evaluation"]["status"] == "PASSED"
    assert line["evaluation"]["performance"]["speedup_factor"] == 2.0


def test_trace_follows_the_nullable_rule():
    with pytest.raises(ValueError):
        _evaluation(status=Status.RUNTIME_ERROR, performance=Performance(1, 1, 1))
    with pytest.raises(ValueError):
        _evaluation(status=Status.INCORRECT_NUMERICAL)
    with pytest.raises(ValueError):
        _evaluation(status=Status.PASSED, correctness=Correctness())


def test_trace_json_has_no_nan():
    evaluation = _evaluation(status=Status.INCORRECT_NUMERICAL,
                             correctness=Correctness(math.nan, math.inf, has_nan=True))
    text = json.dumps(Trace("d", "s", {}, evaluation).to_dict(), allow_nan=False)
    assert '"max_relative_error": null' in text


# -- channel -----------------------------------------------------------------------------------

def _pipe(key: bytes = b"k" * 32) -> tuple[FrameWriter, FrameReader]:
    read_fd, write_fd = os.pipe()
    return FrameWriter(write_fd, key), FrameReader(read_fd, key)


def test_channel_carries_tensors_bit_exactly():
    writer, reader = _pipe()
    values = [torch.randn(3, 5).bfloat16(), torch.randn(4).to(torch.float8_e4m3fn),
              pack_fp4(torch.randn(2, 8)), torch.tensor(True), torch.randn(2, 3).t(), 1.5]
    writer.send("round", {"workload": "w"}, values)
    frame = reader.receive(time.monotonic() + 5)
    assert frame.kind == "round" and frame.meta == {"workload": "w"}
    for sent, got in zip(values[:-1], frame.values[:-1]):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert torch.equal(got.view(torch.uint8), sent.contiguous().view(torch.uint8))
    assert frame.values[-1] == 1.5


def test_channel_rejects_frames_without_the_key():
    read_fd, write_fd = os.pipe()
    FrameWriter(write_fd, b"wrong key").send("timing", {"median_ms": 1e-6})
    with pytest.raises(ChannelForged, match="authentication"):
        FrameReader(read_fd, b"right key").receive(time.monotonic() + 5)


def test_channel_rejects_a_replayed_frame():
    writer, reader = _pipe()
    writer.send("ready")
    writer.sequence = 0  # the same frame again, as a replay would write it
    writer.send("ready")
    reader.receive(time.monotonic() + 5)
    with pytest.raises(ChannelForged):
        reader.receive(time.monotonic() + 5)


def test_channel_rejects_garbage_and_oversized_claims():
    writer, reader = _pipe()
    os.write(writer.fd, b"PASSED 0.001 ms\n" + bytes(40))
    with pytest.raises(ChannelForged, match="magic"):
        reader.receive(time.monotonic() + 5)
    writer, reader = _pipe()
    reader.max_payload = 16
    writer.send("round", {}, [torch.zeros(100)])
    with pytest.raises(ChannelForged, match="beyond"):
        reader.receive(time.monotonic() + 5)


def test_channel_reports_end_of_file_and_timeouts():
    writer, reader = _pipe()
    with pytest.raises(ChannelTimeout):
        reader.receive(time.monotonic() + 0.3)
    os.write(writer.fd, b"SFv1")
    os.close(writer.fd)
    with pytest.raises(ChannelClosed, match="middle"):
        reader.receive(time.monotonic() + 5)


# -- comparison --------------------------------------------------------------------------------

def _compare(out, ref, tolerance: Tolerance | None = None):
    problem = load_problem(SMALL)
    shapes = {"output": tuple(ref.shape)}
    return compare_outputs([out], [ref], problem.definition, shapes, tolerance or Tolerance())


def test_compare_passes_within_tolerance_and_reports_errors():
    ref = torch.randn(4, 256).bfloat16()
    verdict = _compare((ref.float() * 1.005).bfloat16(), ref)
    assert verdict.status is Status.PASSED
    assert 0 < verdict.correctness.max_absolute_error < 0.05
    assert verdict.correctness.matched_ratio == 1.0


def test_compare_fails_nan_inf_and_zeros():
    ref = torch.randn(4, 256).bfloat16()
    nan = ref.clone()
    nan[1, 2] = math.nan
    assert _compare(nan, ref).correctness.has_nan
    inf = ref.clone()
    inf[0, 0] = math.inf
    assert _compare(inf, ref).correctness.has_inf
    zeros = _compare(torch.zeros_like(ref), ref)
    assert zeros.status is Status.INCORRECT_NUMERICAL and "all zeros" in zeros.message


def test_compare_matched_ratio_and_error_cap():
    ref = torch.ones(4, 256).bfloat16()
    out = ref.clone()
    out[0, :5] = 2.0  # 5 of 1024 elements off: 99.5% matched
    assert _compare(out, ref).status is Status.PASSED
    capped = Tolerance(max_error_cap=0.5)
    assert _compare(out, ref, capped).status is Status.INCORRECT_NUMERICAL
    strict = Tolerance(required_matched_ratio=1.0)
    assert _compare(out, ref, strict).status is Status.INCORRECT_NUMERICAL


def test_matched_count_is_exact_at_any_size():
    """A float mean of 262,668,288 booleans is one ulp under 1.0 on CUDA; counts are exact."""
    for n in (262_668_288, (1 << 31) + 7, 1 << 40):
        assert required_count(1.0, n) == n
        assert required_count(0.0, n) == 0
    assert required_count(0.1, 10) == 1  # not 2: 0.1 as written, not the float above it
    assert required_count(0.999, 1000) == 999
    assert required_count(0.995, 1001) == 996  # ceil(995.995)
    ref = torch.ones(16, 256, dtype=torch.bfloat16)
    out = ref.clone()
    out[0, 0] = 5.0  # one element off: 4095 of 4096 within
    needs_all = Tolerance(required_matched_ratio=1.0)
    failed = _compare(out, ref, needs_all)
    assert failed.status is Status.INCORRECT_NUMERICAL and "4095 of 4096" in failed.message
    assert _compare(ref.clone(), ref, needs_all).status is Status.PASSED
    assert _compare(out, ref, Tolerance(required_matched_ratio=4095 / 4096)).status is (
        Status.PASSED)


def test_compare_negative_infinity_only_when_allowed():
    ref = torch.randn(4, 256).bfloat16()
    ref[0, 0] = -math.inf
    out = ref.clone()
    assert _compare(out, ref).status is Status.INVALID_REFERENCE
    assert _compare(out, ref, Tolerance(allow_negative_inf=True)).status is Status.PASSED


def test_compare_checks_shape_and_dtype():
    ref = torch.randn(4, 256).bfloat16()
    assert _compare(ref.float(), ref).status is Status.INCORRECT_DTYPE
    assert _compare(ref[:2], ref).status is Status.INCORRECT_SHAPE


def _tally_by_masked_copies(out64, ref64, tolerance: Tolerance) -> tuple:
    """The tally written the plain way (a masked copy of the kept elements, a reduction read at a
    time): what the one-transfer tally must agree with."""
    shared = (out64 == -torch.inf) & (ref64 == -torch.inf)
    excused = shared if tolerance.allow_negative_inf else torch.zeros_like(shared)
    flags = (not bool((torch.isfinite(ref64) | excused).all()), bool(torch.isnan(out64).any()),
             bool((torch.isinf(out64) & ~excused).any()))
    if any(flags):
        return (*flags, 0, 0, 0.0, 0.0, False, False)
    out64, ref64 = out64[~excused], ref64[~excused]
    if out64.numel() == 0:
        return (False,) * 3 + (0, 0, 0.0, 0.0, False, False)
    error = (out64 - ref64).abs()
    floor = max(tolerance.max_atol, torch.finfo(torch.float64).tiny)
    within = int(torch.count_nonzero(error <= tolerance.max_atol
                                     + tolerance.max_rtol * ref64.abs()))
    return (*flags, error.numel(), within, float(error.max()),
            float((error / ref64.abs().clamp(min=floor)).max()), bool((ref64 != 0).any()),
            bool((out64 != 0).any()))


def test_the_one_transfer_tally_agrees_with_masked_copies():
    generator = torch.Generator().manual_seed(7)
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, 3.0],
                            dtype=torch.float64)
    tolerances = (Tolerance(), Tolerance(max_atol=0.0, max_rtol=1e-6),
                  Tolerance(allow_negative_inf=True), Tolerance(max_atol=0.5, max_rtol=0.0))
    inf = math.inf
    edges = [([0.0, -inf], [0.0, -inf]), ([-inf, -inf], [-inf, -inf]), ([0.0, -inf], [2.0, -inf])]
    for ref_values, out_values in edges:  # all but the excused -infs zero, or nothing kept
        ref, out = (torch.tensor(v, dtype=torch.float64) for v in (ref_values, out_values))
        for tolerance in tolerances:
            tally = compare._tally(compare._reductions(out, ref, tolerance))
            assert (tally.ref_bad, tally.has_nan, tally.has_inf, tally.kept, tally.within,
                    tally.max_abs, tally.max_rel, tally.ref_nonzero, tally.out_nonzero) == (
                _tally_by_masked_copies(out, ref, tolerance)), (ref_values, tolerance)
    for case in range(200):
        n = int(torch.randint(1, 40, (1,), generator=generator))
        ref = torch.randn(n, generator=generator, dtype=torch.float64)
        out = ref + 0.01 * torch.randn(n, generator=generator, dtype=torch.float64)
        for values in (ref, out):  # a few special values at random places, in either
            chosen = torch.rand(n, generator=generator) < 0.15
            picks = torch.randint(0, len(specials), (n,), generator=generator)
            values[chosen] = specials[picks][chosen]
        if case % 5 == 0:
            out = torch.where(torch.rand(n, generator=generator) < 0.5, ref, out)
        for tolerance in tolerances:
            tally = compare._tally(compare._reductions(out, ref, tolerance))
            assert (tally.ref_bad, tally.has_nan, tally.has_inf, tally.kept, tally.within,
                    tally.max_abs, tally.max_rel, tally.ref_nonzero, tally.out_nonzero) == (
                _tally_by_masked_copies(out, ref, tolerance)), (case, tolerance)


def test_compare_in_slices_gives_the_whole_output_verdict(monkeypatch):
    """Outputs are compared a slice at a time (an LM head's 2 G logits ran an H200 out of memory
    as float64 copies); every verdict and figure must be the one the whole output gets."""
    ref = torch.randn(4, 256).bfloat16()
    ref[3, 255] = 8.0
    cases = {"near": (ref.float() * 1.005).bfloat16(), "zeros": torch.zeros_like(ref)}
    for where in ((0, 0), (3, 255)):
        off, nan = ref.clone(), ref.clone()
        off[where] = ref[where] + 3
        nan[where] = math.nan
        cases[f"off{where}"], cases[f"nan{where}"] = off, nan
    bad_ref = ref.clone()
    bad_ref[2, 7] = math.inf
    tolerances = (Tolerance(), Tolerance(required_matched_ratio=1.0), Tolerance(max_error_cap=1))
    whole = {(k, i): _compare(out, ref, t) for k, out in cases.items()
             for i, t in enumerate(tolerances)}
    whole_bad = _compare(cases["nan(3, 255)"], bad_ref)
    monkeypatch.setattr(compare, "_CHUNK", 100)  # 1,024 elements: 11 slices, the last short
    for (k, i), verdict in whole.items():
        assert _compare(cases[k], ref, tolerances[i]) == verdict, (k, i)
    assert whole_bad.status is Status.INVALID_REFERENCE
    assert _compare(cases["nan(3, 255)"], bad_ref) == whole_bad  # the reference's fault first
    assert {v.status for v in whole.values()} == {Status.PASSED, Status.INCORRECT_NUMERICAL}


# -- seeds, logs, guards, speed of light ------------------------------------------------------

def test_a_cheat_on_a_later_workload_disqualifies_earlier_ones():
    results = {"a": WorkloadResult("a", Status.PASSED, timing={"median_ms": 1.0}),
               "b": WorkloadResult("b", Status.INCORRECT_NUMERICAL, "off"),
               "c": WorkloadResult("c", Status.REWARD_HACK, "patched the timer")}
    judged = disqualify(results)
    assert {r.status for r in judged.values()} == {Status.REWARD_HACK}
    assert judged["a"].message == "disqualified: caught cheating on workload c: patched the timer"
    assert judged["c"].message == "patched the timer"
    honest = {"a": results["a"], "b": results["b"]}
    assert disqualify(honest) == honest


def test_a_wrong_timed_output_is_a_cheat_only_for_a_candidate():
    wrong = compare.Comparison(Status.INCORRECT_NUMERICAL, None, "944 of 1024 elements within atol")
    assert _timed_failure(wrong, 15).status is Status.REWARD_HACK
    baseline = _timed_failure(wrong, 15, candidate=False)  # torch.compile's MoE layer did this
    assert baseline.status is Status.INCORRECT_NUMERICAL
    assert "vary between calls" in baseline.message and "944 of 1024" in baseline.message
    missing = compare.Comparison(Status.INVALID_REFERENCE, None, "the reference failed")
    assert _timed_failure(missing, 3).status is Status.INVALID_REFERENCE


def test_seeds_depend_on_secret_phase_and_index():
    plan = SeedPlan(secret=1)
    seeds = {plan.seed("w", ROUND, 0), plan.seed("w", ROUND, 1), plan.seed("w", CALL, 0),
             SeedPlan(secret=2).seed("w", ROUND, 0), plan.seed("v", ROUND, 0)}
    assert len(seeds) == 5
    assert plan.seed("w", ROUND, 0) == SeedPlan(secret=1).seed("w", ROUND, 0)


def test_output_log_keeps_head_and_tail_of_a_flood():
    process = subprocess.Popen([sys.executable, "-c", "print('first'); print('x' * 3000000); "
                                                      "print('last')"], stdout=subprocess.PIPE)
    log = OutputLog(process.stdout, keep_bytes=1000)
    process.wait()
    log.wait(5)
    text = log.text()
    assert log.total_bytes > 3_000_000
    assert text.startswith("first") and text.rstrip().endswith("last")
    assert "dropped" in text and len(text) < 3000


def test_identity_snapshot_sees_a_replaced_function():
    snapshot = IdentitySnapshot(["time"])
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert "time.perf_counter" in snapshot.changed()
    finally:
        time.perf_counter = original
    assert snapshot.changed() == []


def test_identity_snapshot_is_not_blinded_by_patching_its_own_helpers():
    """The check reads the watched names itself (no method of `Namespace` is looked up on the
    way), so a candidate that patches the helper class to report nothing is seen, and so is
    the patch."""
    snapshot = IdentitySnapshot(["time", "solforge.harness.identities"])
    original, changed = time.perf_counter, identities.Namespace.changed
    try:
        identities.Namespace.changed = lambda self: []
        time.perf_counter = lambda: 0.0
        found = snapshot.changed()
    finally:
        time.perf_counter, identities.Namespace.changed = original, changed
    assert "time.perf_counter" in found
    assert "solforge.harness.identities.Namespace.changed" in found
    assert snapshot.changed() == []


def test_identity_snapshot_sees_a_profiler_record_method_replaced():
    """The GPU timer reads kernel spans from the profiler's `_KinetoEvent` records: a pybind
    method reassigned from Python (to shrink every span) is a replaced function."""
    event = torch._C._autograd._KinetoEvent
    snapshot = IdentitySnapshot(["time"])
    original = event.start_ns
    try:
        event.start_ns = lambda self: 0
        assert "_KinetoEvent.start_ns" in snapshot.changed()
    finally:
        event.start_ns = original
    assert snapshot.changed() == []


def test_identity_snapshot_sees_a_name_added_to_a_watched_class_but_not_to_an_open_one():
    """A `__getattribute__` given to a harness class changes what its old names do: an added
    name is reported. `torch.Tensor` is open (libraries add methods to it): not there."""
    snapshot = IdentitySnapshot(["time", "solforge.harness.guards"])
    try:
        guards.Guards.__getattribute__ = lambda self, name: object.__getattribute__(self, name)
        torch.Tensor.solforge_test_extra = lambda self: None
        found = snapshot.changed()
    finally:
        del guards.Guards.__getattribute__
        del torch.Tensor.solforge_test_extra
    assert found == ["solforge.harness.guards.Guards.__getattribute__ (added)"]
    assert "torch.Tensor" in identities.OPEN_CLASSES
    assert snapshot.changed() == []


def test_identity_snapshot_sees_a_module_or_object_given_another_class():
    class Link:
        def send(self):
            return None

    class Halving(Link):
        def send(self):
            return None

    link = Link()
    snapshot = IdentitySnapshot(["time"])
    snapshot.pin("link", link)
    link.__class__ = Halving
    assert snapshot.changed() == ["type(link)"]
    link.__class__ = Link

    class Slow(types.ModuleType):
        pass

    time.__class__ = Slow
    try:
        assert snapshot.changed() == ["type(time)"]
    finally:
        time.__class__ = types.ModuleType
    assert snapshot.changed() == []


def test_identity_snapshot_sees_harness_instance_state():
    class Link:
        def send(self):
            return None

    link = Link()
    link.writer, link.sequence = object(), 0
    snapshot = IdentitySnapshot(["time"])
    snapshot.pin("link", link, mutable=("sequence",))
    link.sequence = 5
    assert snapshot.changed() == []
    link.send = lambda: None  # wrapped on the instance: no class or module name rebound
    assert snapshot.changed() == ["link.send"]
    del link.send
    link.writer = None
    assert snapshot.changed() == ["link.writer"]


def test_hook_snapshot_sees_kernels_and_modes_that_watch_tensors():
    snapshot = HookSnapshot(["aten::equal", "aten::normal_"])
    assert snapshot.changed() == []

    class Snoop(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Snoop():
        assert snapshot.changed() == ["TorchFunctionMode stack"]
    torch.set_default_device("cpu")  # PyTorch's own device mode is no hook
    try:
        assert snapshot.changed() == []
    finally:
        torch.set_default_device(None)
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        library.impl("equal", lambda a, b: True, "AutogradCPU")
    try:
        assert "aten::equal" in snapshot.changed()
    finally:
        library._destroy()
    assert snapshot.changed() == []


def test_only_threads_that_work_after_the_return_are_caught():
    start = threading.Thread.start
    try:
        _threads_after_return(WorkAfterReturn(ThreadOrigins()))
    finally:
        threading.Thread.start = start


def _threads_after_return(watch: WorkAfterReturn) -> None:
    jobs: queue.Queue = queue.Queue()

    def idle_worker():
        while jobs.get() is not None:
            sum(range(2_000_000))  # a job, done while the call waits

    idle = threading.Thread(target=idle_worker, daemon=True)
    idle.start()
    jobs.put(1)
    time.sleep(0.3)  # the "call": the job runs and the worker goes back to queue.get
    watch.mark()
    time.sleep(0.05)
    assert watch.busy() == []  # blocked in queue.get: no work after the return
    jobs.put(1)  # work after the return
    time.sleep(0.3)
    assert any("idle_worker" in found for found in watch.busy())
    watch.mark()
    late = threading.Thread(target=lambda: sum(range(2_000_000)), name="late")
    late.start()
    late.join()  # started and ended between two checks: still seen
    assert any(found.startswith("late") and found.endswith("ended") for found in watch.busy())
    jobs.put(None)


def test_a_thread_that_works_a_little_after_every_return_is_caught_on_the_third():
    """A late writer of a small output uses a tenth of a millisecond after each call: under the
    one-window allowance, so it is counted over windows; a pool that finishes its jobs within
    the calls never is."""
    start = threading.Thread.start
    try:
        watch = WorkAfterReturn(ThreadOrigins())
        jobs: queue.Queue = queue.Queue()
        done: queue.Queue = queue.Queue()

        def pool_thread():
            while (seconds := jobs.get()) is not None:
                began = time.thread_time()
                while time.thread_time() - began < seconds:
                    pass
                done.put(True)

        thread = threading.Thread(target=pool_thread, name="pool", daemon=True)
        thread.start()
        for _ in range(10):  # honest: the job ends before the call returns
            jobs.put(0.0003)
            done.get()
            watch.mark()
            time.sleep(0.01)
            assert watch.busy() == []
        found = []
        for _ in range(3):  # late: the job runs after the return, 0.3 ms of CPU each time
            watch.mark()
            jobs.put(0.0003)
            done.get()
            found.append(watch.busy())
        assert found[:2] == [[], []]
        assert len(found[2]) == 1 and found[2][0].startswith("pool worked after 3 returns")
        jobs.put(None)
    finally:
        threading.Thread.start = start


def test_driver_recomputes_statistics_and_bounds_times_by_its_bracket():
    meta = {"method": "cpu", "times_ms": [1.0, 3.0, 2.0], "median_ms": 0.001,
            "min_ms": 0.001, "sm_clock_mhz": None}
    timing = recompute_timing(meta, [5.0, 5.0, 5.0])
    assert (timing.median_ms, timing.min_ms, timing.max_ms) == (2.0, 1.0, 3.0)
    with pytest.raises(ForgedTiming, match="timed call 1 reported 3 ms"):
        recompute_timing(meta, [5.0, 2.0, 5.0])
    with pytest.raises(WorkerLost):
        recompute_timing({**meta, "times_ms": [1.0, 2.0]}, [5.0, 5.0, 5.0])
    with pytest.raises(WorkerLost):
        recompute_timing({**meta, "method": "stopwatch"}, [5.0, 5.0, 5.0])


_OPEN_SHARED = """
import json, sys, torch
from solforge.harness.handover import receive_values
meta = json.loads(sys.stdin.read())
values = receive_values(meta["values"], meta["shared"], torch.device("cuda"))
print(json.dumps([float(values[0].float().sum()), values[1], list(values[0].shape)]))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_ipc_hands_a_copy_to_another_process():
    """The driver's side shares a pool copy; a second process maps it and copies it out."""
    from solforge.harness.handover import SharedInputs

    device = torch.device("cuda")
    original = torch.randn(300, 7, device=device)[:, 2:]  # a strided view with an offset
    shared = SharedInputs(device)
    values, descriptions = shared.share([original, 1e-5])
    assert values[1] == 1e-5 and descriptions[1] is None and descriptions[0]["kind"] == "cuda_ipc"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    child = subprocess.run([sys.executable, "-c", _OPEN_SHARED], capture_output=True, text=True,
                           input=json.dumps({"values": values, "shared": descriptions}),
                           env=env, timeout=120)
    assert child.returncode == 0, child.stderr
    total, scalar, shape = json.loads(child.stdout)
    assert shape == [300, 5] and scalar == 1e-5
    assert total == pytest.approx(float(original.sum()), rel=1e-5)
    shared.release()


_WRITE_SLOT = """
import json, sys, torch
from solforge.harness.handover import OutputSlots
meta = json.loads(sys.stdin.read())
slots = OutputSlots.mapped(meta["slots"], 2)
print(json.dumps(slots.fill([torch.full((64, 3), 2.5, device="cuda"), 7])))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_ipc_output_slots_carry_a_call_output_back_from_another_process():
    """A second process writes its output into the driver's slot; the driver's copy holds it
    and is its own memory (later writes into the slot do not reach it)."""
    from solforge.harness.handover import SharedInputs, taken

    device = torch.device("cuda")
    slots, descriptions = SharedInputs(device).output_slots([((64, 3), torch.float32), None])
    assert slots[1] is None and descriptions[1] is None
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    child = subprocess.run([sys.executable, "-c", _WRITE_SLOT], capture_output=True, text=True,
                           input=json.dumps({"slots": descriptions}), env=env, timeout=120)
    assert child.returncode == 0, child.stderr
    sent = json.loads(child.stdout)
    assert sent == [0, 7]  # the slotted output travels as a placeholder
    copies = taken(sent, slots)
    slots[0].zero_()
    assert copies[1] == 7 and torch.equal(copies[0], torch.full((64, 3), 2.5, device=device))


class _BrokenInputs:
    """An oracle whose input generation fails, for a judge that talks to no worker."""

    device = torch.device("cpu")

    def inputs(self, workload, seed):
        raise ValueError("custom inputs entrypoint failed")

    def output_shapes(self, workload):
        return {"output": (8, 256)}

    def release(self, workload):
        pass

    problem = load_problem(SMALL)


class _RecordingSession:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, kind, meta=None, values=()) -> None:
        self.sent.append(kind)

    def deadline(self, seconds: float) -> float:
        return time.monotonic() + seconds


def test_the_judge_compares_what_the_slots_hold_not_what_the_frame_says():
    """With output slots the frame's values are placeholders: the driver's copy of the slot is
    what it compares; a frame whose outputs do not match the slots breaks the protocol."""
    plan = Plan(SeedPlan(secret=1), rounds=1, warmup=1, iterations=2, verify=1)
    judge = Judge(_RecordingSession(), _BrokenInputs(), plan, 10.0)
    slot = torch.full((8, 256), 2.0)
    judge.slots = [slot]
    values = judge._taken(Frame(protocol.CALL_OUTPUT, {}, [0]))
    slot.zero_()
    assert torch.equal(values[0], torch.full((8, 256), 2.0))
    with pytest.raises(WorkerLost, match="2 outputs arrived for 1 slots"):
        judge._taken(Frame(protocol.CALL_OUTPUT, {}, [0, 1]))
    judge.slots = None  # no slots: the frame's tensors (views of the shared area), copied
    sent = torch.ones(3)
    taken = judge._taken(Frame(protocol.CALL_OUTPUT, {}, [sent]))[0]
    sent.zero_()
    assert torch.equal(taken, torch.ones(3))


class _OnTheGpu:
    device = torch.device("cuda")


class _SandboxedSession(_RecordingSession):
    sandbox = SimpleNamespace(uid=61234)  # a sandbox that switched to a private uid


def test_no_cuda_ipc_probe_for_a_worker_under_the_sandboxs_private_uid():
    """CUDA IPC never maps across uids: such a worker gets its tensors through the frames, and
    the trace says why, without a probe, unless it has the socket that device memory can be
    shared through by descriptor (vmm.py): then the probe tries that."""
    plan = Plan(SeedPlan(secret=1), rounds=1, warmup=1, iterations=2, verify=1)
    private = Judge(_SandboxedSession(), _OnTheGpu(), plan, 10.0)
    assert private.probed and "across the sandbox's uid" in private.handover
    same_uid = Judge(_RecordingSession(), _OnTheGpu(), plan, 10.0)
    assert not same_uid.probed and same_uid.handover == ""
    linked = _SandboxedSession()
    linked.link = object()
    by_descriptor = Judge(linked, _OnTheGpu(), plan, 10.0)
    assert not by_descriptor.probed and by_descriptor.across_uids


def test_failed_input_generation_is_an_invalid_reference_not_a_crash():
    session = _RecordingSession()
    plan = Plan(SeedPlan(secret=1), rounds=2, warmup=1, iterations=2, verify=1)
    workload = load_problem(SMALL).workloads[0]
    result = Judge(session, _BrokenInputs(), plan, 10.0).judge(workload)
    assert result.status is Status.INVALID_REFERENCE and result.fatal
    assert "custom inputs entrypoint failed" in result.message
    assert session.sent == ["start"]  # no inputs ever left the driver


class _SlowSendSession(_RecordingSession):
    """A send that returns late, as a pipe write does once the worker has read the inputs
    and may already be running the call."""

    def send(self, kind, meta=None, values=()) -> None:
        super().send(kind, meta, values)
        self.returned = time.monotonic() + 0.05
        time.sleep(0.05)


class _Inputs:
    def inputs(self, workload, seed):
        return [torch.ones(2)]


def test_the_bracket_opens_before_the_inputs_are_sent():
    """A bracket opened after send() returned would be shorter than an honest call's time."""
    session = _SlowSendSession()
    judge = Judge(session, _BrokenInputs(), Plan(SeedPlan(secret=1), 1, 0, 1, 1), 10.0)
    judge.oracle = _Inputs()
    judge.workload = load_problem(SMALL).workloads[0]
    opened = judge._hand_over("call", 0, 7)
    assert session.sent == ["inputs"] and opened <= session.returned - 0.04


def test_live_children_finds_a_running_subprocess():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in live_children()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in live_children()


def test_live_children_lists_agree_with_the_scan_and_skip_zombies(monkeypatch):
    """The kernel's per-thread children lists and the scan of every process find the same
    children; an exited child not yet reaped is not live."""
    from solforge.harness import guards

    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while guards._live_parent(exited.pid) is not None:
            time.sleep(0.01)  # a zombie until waited for
        listed = live_children()
        monkeypatch.setattr(guards, "_listed_children", lambda pid: None)
        assert sorted(live_children()) == sorted(listed)
        assert running.pid in listed and exited.pid not in listed
    finally:
        running.kill()
        running.wait()
        exited.wait()


def test_floor_and_score():
    sol = SpeedOfLight(t_sol_ms=1.0, floor_ms=0.8, bound="memory", hardware="H200")
    assert below_floor(0.5, sol) is not None and below_floor(0.9, sol) is None
    assert score(1.0 + 1.0, 3.0, sol) == (pytest.approx(2 / 3), None)
    value, note = score(0.9, 3.0, sol)  # possible (above the floor) but faster than T_SOL
    assert value is None and "speed-of-light" in note
    assert score(2.0, None, sol) == (None, "no baseline time")


# -- end to end on the CPU ---------------------------------------------------------------------

def test_cpu_selects_the_smallest_workloads():
    problem = load_problem(SMALL)
    config = EvalConfig(device="cpu")
    assert [w.uuid for w in select_workloads(problem, config, torch.device("cpu"))] == [
        "small-t8", "small-t64"]
    one = replace(config, smallest=1)
    assert [w.uuid for w in select_workloads(problem, one, torch.device("cpu"))] == ["small-t8"]
    named = replace(config, workloads=("small-t64",))
    assert [w.uuid for w in select_workloads(problem, named, torch.device("cpu"))] == [
        "small-t64"]


BROKEN_REFERENCE = RMSNORM.replace("return norm_weight * y", "return norm_weight * y * math.nan")
DPS_RMSNORM = RMSNORM.replace("eps):", "eps, output):").replace("return norm_weight * y",
                                                                 "output.copy_(norm_weight * y)")
VERDICTS = {  # name: (solution source, expected status, a phrase of the verdict)
    "syntax_error": ("def run(hidden_states, norm_weight, eps:\n", Status.COMPILE_ERROR,
                     "SyntaxError"),
    "no_entry_point": ("def other():\n    pass\n", Status.COMPILE_ERROR, "no callable 'run'"),
    "wrong_shape": ("def run(hidden_states, norm_weight, eps):\n    return hidden_states[:1]\n",
                    Status.INCORRECT_SHAPE, "shape"),
    "wrong_dtype": ("def run(hidden_states, norm_weight, eps):\n"
                    "    return hidden_states.float()\n", Status.INCORRECT_DTYPE, "dtype"),
    "raises": ("def run(hidden_states, norm_weight, eps):\n    raise ValueError('broken kernel')\n",
               Status.RUNTIME_ERROR, "broken kernel"),
    "broken_reference": (RMSNORM, Status.INVALID_REFERENCE, "NaN"),
}


def _broken_problem(folder: Path) -> Path:
    folder.mkdir()
    definition = json.loads((SMALL / "definition.json").read_text())
    definition["reference"] = "import math\n" + BROKEN_REFERENCE
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text((SMALL / "workload.jsonl").read_text())
    return folder


@pytest.fixture(scope="module")
def verdicts(request, tmp_path_factory):
    """The end-to-end cases the selected tests read, evaluated a few at a time (each is a
    worker process)."""
    cache = tmp_path_factory.mktemp("cache")
    broken = _broken_problem(tmp_path_factory.mktemp("problems") / "broken")

    def run_case(name: str) -> list[Trace]:
        if name == "destination_passing":  # the second run finds T_b in the cache
            solution = parse_solution(_solution(DPS_RMSNORM, dps=True))
            problem = load_problem(SMALL)
            return evaluate(problem, solution, _cpu_config(cache)) + evaluate(
                problem, solution, _cpu_config(cache))
        problem = load_problem(broken if name == "broken_reference" else SMALL)
        return evaluate(problem, parse_solution(_solution(VERDICTS[name][0])),
                        _cpu_config(cache))

    reads = {"test_destination_passing_solution_passes_and_baseline_is_cached":
             ["destination_passing"]}
    return Computed(side_by_side(run_case)).fetch(selected_keys(request, "name", reads))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(VERDICTS))
def test_verdicts_that_are_not_hacks(verdicts, name):
    _, status, phrase = VERDICTS[name]
    traces = verdicts[name]
    assert [t.status for t in traces] == [status]
    assert phrase in traces[0].evaluation.log


def test_destination_passing_solution_passes_and_baseline_is_cached(verdicts):
    first, second = verdicts["destination_passing"]
    assert [first.status, second.status] == [Status.PASSED] * 2
    assert not first.evaluation.baseline.cached
    assert second.evaluation.baseline.cached
    evaluation = first.evaluation
    assert evaluation.timing.device == "cpu" and evaluation.timing.iterations == 10
    assert len(evaluation.timing.verified_iterations) == 3
    assert evaluation.sol_score is None and "CPU timing" in evaluation.notes[0]
    assert evaluation.t_sol_ms > 0 and evaluation.sol_bound == "memory"
    assert evaluation.performance.reference_latency_ms == evaluation.baseline.latency_ms


@pytest.mark.slow
def test_cpp_compile_error_carries_the_compiler_message(tmp_path):
    source = "int run(int x) { return x }\n"  # missing semicolon
    solution = parse_solution(_solution(source, language="cpp", path="kernel.cpp"))
    traces = evaluate(load_problem(SMALL), solution, _cpu_config(tmp_path))
    assert [t.status for t in traces] == [Status.COMPILE_ERROR]
    assert "error" in traces[0].evaluation.log


@pytest.mark.skipif(not __import__("shutil").which("nvcc"), reason="needs nvcc")
@pytest.mark.parametrize(("source", "status", "phrase"), [
    ("__global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }\n", Status.RUNTIME_ERROR,
     "compile-only check passed"),
    ("__global__ void add_one(float* x) { x[threadIdx.x] += 1.0f }\n", Status.COMPILE_ERROR,
     "nvcc"),
])
def test_cuda_solution_on_a_cpu_machine_is_compiled_only(tmp_path, source, status, phrase):
    solution = parse_solution(_solution(source, language="cuda_cpp", path="kernel.cu"))
    traces = evaluate(load_problem(SMALL), solution, _cpu_config(tmp_path))
    assert [t.status for t in traces] == [status]
    assert phrase in traces[0].evaluation.log


@pytest.mark.slow
def test_cli_eval_json_and_output_file(tmp_path):
    output = tmp_path / "traces.jsonl"
    solution = HONEST / "pytorch_rmsnorm" / "solution.py"
    result = CliRunner().invoke(app, ["eval", str(SMALL), str(solution), "--device", "cpu",
                                      "--baseline", "eager", "--smallest", "1", "--json",
                                      "-o", str(output)],
                                env={"SOLFORGE_CACHE": str(tmp_path)})
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [line["evaluation"]["status"] for line in lines] == ["PASSED"]
    assert read_traces(output)[0].evaluation.timing.method == "cpu"
