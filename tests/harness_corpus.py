"""The harness's fixture corpus: exploits that must be caught, honest solutions that must pass.

Each fixture is a folder holding a solution (`solution.py` or `solution.json`) and an
`expected.json`:
    status          the status every evaluated workload must get
    device          "any" (CPU in CI and the GPU script), "cpu" or "gpu" (GPU script only)
    problem         a problem folder under tests/fixtures/harness (default rmsnorm_small)
    config          EvalConfig overrides; `hardware` is a path relative to the fixture, and
                    setup_timeout_s / workload_timeout_s set the limits
    message         a phrase the verdict (log or evidence) must contain
    min_latency_ms  for PASSED: the measured time must include at least this much (work
                    hidden on a side stream must be timed)
    why             what the fixture does
A new hack found later becomes a new folder here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from solforge.data.solution import load_solution
from solforge.data.trace import Status, Trace
from solforge.harness.evaluate import EvalConfig, evaluate
from solforge.harness.session import Limits
from solforge.problem import load_problem

TESTS = Path(__file__).resolve().parent
EXPLOITS = TESTS / "exploits"
HONEST = TESTS / "fixtures" / "harness" / "honest"
PROBLEMS = TESTS / "fixtures" / "harness"
_LIMITS = ("setup_timeout_s", "workload_timeout_s")


@dataclass(frozen=True)
class Fixture:
    name: str
    folder: Path
    status: Status
    device: str
    problem: Path
    config: dict[str, Any] = field(default_factory=dict)
    message: str | None = None
    min_latency_ms: float | None = None

    @property
    def solution_path(self) -> Path:
        found = [self.folder / n for n in ("solution.json", "solution.py")
                 if (self.folder / n).is_file()]
        return found[0]

    def runs_on(self, device_type: str) -> bool:
        wanted = "gpu" if device_type == "cuda" else "cpu"
        return self.device in ("any", wanted)


def load_fixtures(root: Path) -> list[Fixture]:
    fixtures = []
    for folder in sorted(p for p in root.iterdir() if (p / "expected.json").is_file()):
        data = json.loads((folder / "expected.json").read_text())
        fixtures.append(Fixture(
            name=folder.name, folder=folder, status=Status(data["status"]),
            device=data.get("device", "any"),
            problem=PROBLEMS / data.get("problem", "rmsnorm_small"),
            config=data.get("config", {}), message=data.get("message"),
            min_latency_ms=data.get("min_latency_ms")))
    return fixtures


def eval_config(fixture: Fixture, base: EvalConfig) -> EvalConfig:
    """The base configuration with the fixture's overrides."""
    overrides = {k: v for k, v in fixture.config.items() if k not in _LIMITS}
    if "hardware" in overrides:
        overrides["hardware"] = str(fixture.folder / overrides["hardware"])
    limits = {k: fixture.config[k] for k in _LIMITS if k in fixture.config}
    return replace(base, limits=replace(base.limits, **limits), **overrides)


def run_fixture(fixture: Fixture, base: EvalConfig) -> list[Trace]:
    problem = load_problem(fixture.problem)
    solution = load_solution(fixture.solution_path, problem.name)
    return evaluate(problem, solution, eval_config(fixture, base))


def mismatches(fixture: Fixture, traces: list[Trace]) -> list[str]:
    """What differs from the fixture's expectations (empty: as expected)."""
    found = []
    for trace in traces:
        evaluation = trace.evaluation
        where = f"{fixture.name} @ {trace.workload['uuid']}"
        if evaluation.status is not fixture.status:
            first = (evaluation.log or "").strip()[:600]
            found.append(f"{where}: {evaluation.status.value}, expected "
                         f"{fixture.status.value}: {first}")
            continue
        text = f"{evaluation.log}\n{evaluation.evidence or ''}".lower()
        if fixture.message and fixture.message.lower() not in text:
            found.append(f"{where}: verdict does not mention {fixture.message!r}: {text[:400]}")
        timing = evaluation.timing
        if fixture.min_latency_ms is not None and (
                timing is None or timing.median_ms < fixture.min_latency_ms):
            found.append(f"{where}: timed {timing.median_ms if timing else None} ms, expected "
                         f">= {fixture.min_latency_ms} ms (work left out of the timing)")
    if not traces:
        found.append(f"{fixture.name}: no traces")
    return found


def short_limits() -> Limits:
    """Short limits for the tests (an honest fixture needs a few seconds)."""
    return Limits(setup_timeout_s=60.0, workload_timeout_s=60.0)
