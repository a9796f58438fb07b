"""A bench's results read back from the store: per problem, T_SOL and each role's outcome on
each workload. The summary is computed from these alone, so a rerun that measured nothing new
prints the same tables as the run that measured everything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from solforge.bench.run import BenchOutcome, StoredProblem
from solforge.data.trace import Status
from solforge.harness.baseline import KINDS, reference_solution_name
from solforge.solar.analysis import DEFAULT_FP32_POLICY

if TYPE_CHECKING:
    from solforge.store import Store


@dataclass(frozen=True)
class Measured:
    """One role on one workload: did it pass, and its median time."""

    passed: bool
    latency_ms: float | None


@dataclass(frozen=True)
class ProblemResults:
    address: str
    tier: str | None
    workloads: tuple[str, ...]  # uuids
    t_sol_ms: dict[str, float]  # uuid -> T_SOL on the run's hardware profile
    references: dict[str, dict[str, Measured]]  # "eager" / "compile" -> uuid -> outcome
    solutions: dict[str, dict[str, Measured]]  # solution name -> uuid -> outcome

    def reference_ms(self, kind: str, uuid: str) -> float | None:
        measured = self.references.get(kind, {}).get(uuid)
        return measured.latency_ms if measured and measured.passed else None


def read_results(store: Store, outcome: BenchOutcome) -> list[ProblemResults]:
    return [problem_results(store, stored, outcome) for stored in outcome.problems]


def problem_results(store: Store, stored: StoredProblem,
                    outcome: BenchOutcome) -> ProblemResults:
    uuid_of = {workload_id: uuid for uuid, workload_id in stored.workload_ids.items()}
    name_of = {solution_id: name for name, solution_id in stored.solution_ids.items()}
    kind_of = {reference_solution_name(kind): kind for kind in KINDS["best"]}
    t_sol = store.t_sol_ms(list(uuid_of), outcome.profile, DEFAULT_FP32_POLICY)
    references: dict[str, dict[str, Measured]] = {}
    solutions: dict[str, dict[str, Measured]] = {}
    for row in store.find_traces(list(uuid_of), list(name_of), outcome.device, outcome.hardware):
        name = name_of[row.solution_id]
        outcomes = (references.setdefault(kind_of[name], {}) if name in kind_of
                    else solutions.setdefault(name, {}))
        outcomes[uuid_of[row.workload_id]] = Measured(row.status == Status.PASSED.value,
                                                      row.latency_ms)
    return ProblemResults(stored.address, stored.tier, tuple(stored.workload_ids),
                          {uuid_of[w]: ms for w, ms in t_sol.items()}, references, solutions)
