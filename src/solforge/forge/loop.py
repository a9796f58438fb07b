"""The optimize loop: propose kernels, judge them through the harness, keep a MAP-Elites archive.

    templates  every template that applies to the problem searches its parameter space
               (search.py: exhaustive when small, Optuna TPE otherwise) and seeds the archive;
    llm        the model writes kernels from the problem, its speed-of-light analysis, elites of
               different cells (parents) and the feedback of earlier attempts;
    both       templates first, then the model builds on what they found.

After the template searches (and before the model), `compose` (on by default) builds one
composite from the candidates judged so far, each workload shape dispatched to the candidate
fastest on it (compose.py), and judges it like any candidate (proposer "compose"). Where the
workloads have more than one shape, the problem's reference is judged first as a candidate
part of its own (reference_part.py, proposer "reference"), so a shape no kernel beats PyTorch
on goes to PyTorch. Both are judged beyond the budget (they are built from what the budget
bought) but within the time.
`recompose` does the same for a store whose candidates were judged before per-workload results
were kept: it judges the best candidate of each template again first, recording their
per-workload results on their existing rows; with `seeds`, it also judges each template's seeds
that the store lacks (a store searched before the templates had them).

Every candidate is judged by the harness (the loop never times anything), described by the
kernels it compiles to (descriptors.py), and stored (archive.py). With a `patience`, a search
(one template's, or the model's) ends once that many candidates in a row have not raised the
problem's best fitness by more than MIN_GAIN, and the run says whether every search ended
that way or by exhausting its settings (converged) rather than by the budget or the time.
With a runner (solforge.runners: local slots, one per GPU or core, or a Ray cluster)
candidates are judged in batches of as many as it has slots, each in a fresh process of its
own; without one they are judged here, one at a time (the harness still runs each in its own
worker process).
The GPU never waits on the CPU's share of the work: a batch holds `QUEUE_AHEAD` candidates more
than the runner has slots (the runner queues them; its spare processes start the next unit the
moment a slot frees), and each candidate's descriptor (its Triton kernels compiled for sm_90a,
a CPU job) is captured in a thread of its own while the batch is being judged, not after.
On a GPU, that thread first compiles the candidate's kernels for every workload the harness
will time (on meta tensors, capture.compile_ahead) and keeps their Triton cache for the
candidate's worker (harness/sandbox/jit_ahead.py), so a unit that starts after that compiles
none of its kernels on the GPU's time; each candidate's kept kernels are removed once it is
judged.
Racing (`race`, on by default): each candidate is first timed briefly (the harness's screen,
evaluate.SCREEN: its correctness checks in full, fewer warm-up and timed calls), and timed in
full only when its brief fitness comes within CONFIRM_MARGIN of the best so far (the
problem's, or its batch's): those are the candidates whose numbers the run reports or builds
on. The others keep the brief verdict, marked as such in the store (archive.mark_screened):
it stays more than CONFIRM_MARGIN below the best, so the best a run reports has been timed in
full. In the stores of the H200's goal run, 20% of 582 candidates came within 5% of the best
of their time: racing would time about one candidate in five twice and the others briefly.
A candidate already judged for this problem, by this run or another worker, is not judged
again. Only a PASSED candidate with a fitness can become an elite; a REWARD_HACK is stored with
its evidence and never does.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from solforge.data.solution import Solution, parse_solution
from solforge.data.trace import Status, Trace
from solforge.data.workload import Workload
from solforge.errors import SolforgeError
from solforge.forge import archive
from solforge.forge.compose import PROPOSER as COMPOSE
from solforge.forge.compose import Composition, compose, shape_groups
from solforge.forge.fitness import Verdict, verdict, workload_results
from solforge.forge.reference_part import PROPOSER as REFERENCE
from solforge.forge.reference_part import reference_candidate
from solforge.forge.search import search
from solforge.forge.templates import templates_for
from solforge.harness.evaluate import EvalConfig, default_cache_dir, evaluate, select_workloads
from solforge.harness.sandbox import jit_ahead
from solforge.humanize import fitness
from solforge.problem.problem import Problem

if TYPE_CHECKING:
    from solforge.forge.llm import LLMConfig
    from solforge.hardware.profile import HardwareProfile
    from solforge.runners import TaskRunner
    from solforge.store import Store

PROPOSERS = ("templates", "llm", "both")
RECENT_ATTEMPTS = 8  # feedback the model sees
PARENTS = 3  # elites of different cells shown to the model
QUEUE_AHEAD = 3  # candidates queued on a runner beyond its slots, so a free slot never waits
DESCRIBE_THREADS = 4  # descriptor captures (each a compile process) running beside the judging
RECOMPOSE_PARTS = 4  # candidates `recompose` judges again: the best of each template
TEMPLATE_PREFIX = "template:"  # a template's candidates' proposer: "template:<name>"
CONFIRM_MARGIN = 0.05  # a brief fitness this close to the best (relative) is timed in full:
# several times the 1% a full timing aims its median at, as a brief one has half the calls or
# fewer (SearchOutcome.confirmations has both fitnesses of each candidate timed twice)
MIN_GAIN = 0.01  # a best fitness this much higher (relative) is progress: above the run-to-run
# scatter of kernels of 20 us and more on the H200 (0.25%), below the 3% a run may differ by


class OptimizeError(SolforgeError):
    pass


class _Exhausted(Exception):
    """The budget or the time ran out in the middle of a search."""


class _Stalled(Exception):
    """`patience` candidates in a row brought no gain: this search has converged."""


@dataclass(frozen=True)
class OptimizeConfig:
    budget: int | None = 20  # candidates to judge
    minutes: float | None = None
    proposer: str = "templates"
    llm: LLMConfig | None = None
    device: str = "cuda"
    hardware: str | None = None
    baseline: str = "best"
    seed: int = 0
    cache_dir: Path | None = None
    ncu: bool = True  # on a GPU with ncu on PATH: Nsight Compute metrics in the LLM's feedback
    patience: int | None = None  # candidates without a gain that end a search (None: never)
    compose: bool = True  # after the templates: judge a per-shape composite of the winners
    race: bool = True  # time each candidate briefly first, in full only near the best

    def __post_init__(self) -> None:
        if self.proposer not in PROPOSERS:
            raise OptimizeError(f"unknown proposer {self.proposer!r} (choose from "
                                f"{', '.join(PROPOSERS)})")
        if self.proposer != "templates" and self.llm is None:
            raise OptimizeError("the llm proposer needs --llm-base-url and --model")
        if self.budget is None and self.minutes is None:
            raise OptimizeError("give a budget (--budget N) or a time (--time MIN)")
        if self.patience is not None and self.patience < 1:
            raise OptimizeError(f"--patience {self.patience}: at least one candidate")


@dataclass(frozen=True)
class SearchOutcome:
    judged: int  # candidates the harness judged in this run
    reused: int  # candidates already in the store
    hacks: int
    best: archive.Elite | None
    elites: list[archive.Elite]
    converged: bool = False  # every search stalled (patience) or ran out of settings
    out_of_time: bool = False  # the time limit (`minutes`) ended it, not the budget
    confirmed: int = 0  # candidates timed in full after their brief timing (racing)
    screened: int = 0  # candidates that kept their brief timing
    confirmations: tuple[tuple[float, float | None], ...] = ()  # (brief, full) fitness of each


class Optimizer:
    """`runner`, when given, judges the candidates; `address` is how its workers find the
    problem (a bundled `tier/name`, or a folder that exists where they run)."""

    def __init__(self, problem: Problem, store: Store, config: OptimizeConfig,
                 report: Callable[[str], None], runner: TaskRunner | None = None,
                 address: str | None = None) -> None:
        if runner is not None and address is None:
            raise OptimizeError("a runner needs the problem's address")
        self.problem = problem
        self.store = store
        self.config = config
        self.report = report
        self.runner = runner
        self.address = address
        self.parallel = runner.slots + QUEUE_AHEAD if runner is not None else 1
        self._describing = ThreadPoolExecutor(DESCRIBE_THREADS, "describe")
        self._ahead_root = (None if config.device == "cpu" else  # the interpreter compiles none
                            (config.cache_dir or default_cache_dir()) / jit_ahead.FOLDER)
        self._kept_ahead: set[Path] = set()  # this run's kernels compiled ahead, until judged
        self.judged = self.reused = self.hacks = self.rejudged = self.seeds_judged = 0
        self.confirmed = self.screened = 0
        self.confirmations: list[tuple[float, float | None]] = []
        self.deadline = (time.monotonic() + 60 * config.minutes) if config.minutes else None
        self.attempts: list = []
        self.best_fitness: float | None = _best_fitness(archive.elites(store, problem.name))
        self.without_gain = 0  # candidates judged in this search since the best last rose
        self.cut_short = False  # the budget or the time ended a search
        self.out_of_time = False  # the time did

    def run(self) -> SearchOutcome:
        try:
            if self.config.proposer in ("templates", "both"):
                self._until_exhausted(self._templates)
                if self.config.compose:
                    self._until_exhausted(self._compose)
            if self.config.proposer in ("llm", "both"):
                self._until_exhausted(lambda: self._stalls_end(self._llm, "the model"))
        finally:
            self._describing.shutdown(wait=True, cancel_futures=True)
            self._discard_ahead()
        return self._outcome()

    def _outcome(self) -> SearchOutcome:
        elites = archive.elites(self.store, self.problem.name)
        return SearchOutcome(self.judged, self.reused, self.hacks, elites[0] if elites else None,
                             elites, converged=self.config.patience is not None
                             and not self.cut_short, out_of_time=self.out_of_time,
                             confirmed=self.confirmed, screened=self.screened,
                             confirmations=tuple(self.confirmations))

    def _until_exhausted(self, searching: Callable[[], None]) -> None:
        """Run one stage; the budget or the time running out ends it (and says so)."""
        try:
            searching()
        except _Exhausted:
            self.cut_short = True

    def _stalls_end(self, searching: Callable[[], None], what: str) -> None:
        """Run one search; a stall (patience) ends it, and the run goes on to the next."""
        self.without_gain = 0
        try:
            searching()
        except _Stalled:
            self.report(f"{what}: no gain above {MIN_GAIN:.0%} in the last "
                        f"{self.config.patience} candidates; converged")

    # ---- proposers -------------------------------------------------------------------------

    def _templates(self) -> None:
        templates = templates_for(self.problem.definition)
        if not templates:
            self.report("no template applies to this problem")
            return
        for number, template in enumerate(templates):
            share = self._remaining_budget(len(templates) - number)
            self.report(f"template {template.name}: searching up to {share} settings")

            def searching(template=template, share=share) -> None:
                def objective(solutions: list[dict[str, Any]]) -> list[float | None]:
                    judged = self.judge_batch(solutions, f"{TEMPLATE_PREFIX}{template.name}")
                    return [one.fitness for one in judged]

                trials = search(template, self.problem, objective, share, self.config.seed,
                                self.parallel)
                if len(trials) >= share:  # its share of the budget ended it (or used it up
                    self.cut_short = True  # exactly): not shown to have converged

            self._stalls_end(searching, f"template {template.name}")

    def _llm(self) -> None:
        from solforge.forge.llm import LLMProposer, Parent, attempt_from_proposal
        from solforge.solar import analyze_workload

        proposer = LLMProposer(self.config.llm, self.store)
        representative = max(self.problem.workloads, key=self.problem.input_elements)
        analysis = analyze_workload(self.problem, representative, self._profile())
        while True:
            self._check_budget()
            parents = [Parent(e.name, e.solution, e.fitness, e.latency_ms, e.descriptor)
                       for e in archive.elites(self.store, self.problem.name)]  # best first
            proposals = proposer.propose(self.problem, analysis, parents[:PARENTS],
                                         self.attempts[-RECENT_ATTEMPTS:])
            for proposal in proposals:
                if proposal.solution is None:
                    self.attempts.append(attempt_from_proposal(proposal))
                    proposer.record_outcome(proposal, [])
            written = [p for p in proposals if p.solution is not None][:self._budget_left()]
            judged = self._judge_traces([p.solution for p in written],
                                        f"llm:{self.config.llm.model}")
            for proposal, traces in zip(written, judged):
                proposer.record_outcome(proposal, traces)

    # ---- composition ------------------------------------------------------------------------

    def compose(self) -> Composition | None:
        """Judge the per-shape composite of the candidates judged so far (within the time, not
        the budget), and report where each workload went and the verdict; None when the time
        ran out first."""
        try:
            return self._compose()
        except _Exhausted:
            return None

    def _compose(self) -> Composition:
        workloads = self._judged_workloads()
        if len(shape_groups(self.problem, workloads)) > 1:
            self._judge_reference()
        found = compose(self.problem, archive.passed(self.store, self.problem.name), workloads)
        if found.solution is None:
            self.report(f"compose: nothing to compose ({found.reason})")
            return found
        self.report(f"compose: {len(found.parts)} parts, fallback {found.fallback.name}; "
                    f"{found.summary()}")
        self._check_time()
        judged = self.judge_batch([found.solution], COMPOSE,
                                   [self._fallback_descriptor(found)])[0]
        self.report(f"compose: {found.solution['name']}: {_outcome(judged)}")
        return found

    def _judge_reference(self) -> None:
        """Judge the problem's reference as a part for the composite (reference_part.py), once
        per store, beyond the budget as the composite is; never an elite (it has no cell)."""
        solution = reference_candidate(self.problem.definition)
        if solution is None:
            return
        self._check_time()
        no_cell: Future = Future()
        no_cell.set_result(({}, None))
        judged = self.judge_batch([solution], REFERENCE, [no_cell])[0]
        shown = (f"T_k {judged.latency_ms:.4g} ms" if judged.latency_ms is not None
                 else (judged.evidence or "")[:120])
        self.report(f"compose: the reference as a part: {judged.status}, {shown}")

    def recompose(self, limit: int = RECOMPOSE_PARTS,
                  seeds: bool = False) -> Composition | None:
        """Compose in a store written before per-workload results were kept: judge again (not
        read back) the best candidate of each template, at most `limit`, that lacks a result on
        a judged workload, keeping their results on their existing rows, then compose. With
        `seeds`, each template's seeds the store lacks are judged first (`_judge_seeds`).
        None when the time ran out first (what was judged is kept: a later call goes on)."""
        try:
            if seeds:
                self._judge_seeds()
            self._rejudge(limit)
            return self._compose()
        except _Exhausted:
            return None

    def _judge_seeds(self) -> None:
        """Judge each template's seeds (settings known to suit the target, search.py) that
        are valid here and not in the store yet, as candidates of their template: a store
        filled by searches that ran before a template had seeds, or before these, has never
        measured them. Beyond the budget, within the time (`seeds_judged` counts them)."""
        for template in templates_for(self.problem.definition):
            settings = [dict(s) for s in template.seeds
                        if template.invalid_reason(s, self.problem) is None]
            solutions = [template.render(s, self.problem) for s in settings]
            new = [s for s in solutions if archive.find(self.store, self.problem.name, s) is None]
            for start in range(0, len(new), self.parallel):
                self._check_time()
                batch = new[start:start + self.parallel]
                described = [self._describing.submit(self._describe, s) for s in batch]
                verdicts = self.judge_batch(batch, f"{TEMPLATE_PREFIX}{template.name}",
                                            described)  # described ahead: beyond the budget
                self.seeds_judged += len(batch)
                for solution, judged in zip(batch, verdicts):
                    self.report(f"seed {solution['name']}: {_outcome(judged)}")

    def _rejudge(self, limit: int) -> None:
        """Judge again the best candidate of each template lacking per-workload results; their
        aggregate rows and the archive are left as they are (only the results are new)."""
        wanted = {w.uuid for w in self._judged_workloads()}
        for judged in archive.best_of_each_proposer(self.store, self.problem.name, limit,
                                                    prefix=TEMPLATE_PREFIX):
            if wanted <= set(judged.latencies):
                continue
            self._check_time()
            traces = self._measure([judged.solution], screen=False)[0]
            archive.record_workloads(self.store, judged.candidate_id, workload_results(traces))
            self.rejudged += 1
            self.report(f"recompose: {judged.name} judged again ({verdict(traces).status})")

    def _judged_workloads(self) -> list[Workload]:
        """The workloads the harness judges each candidate on (on the CPU, the smallest)."""
        device = torch.device("cpu" if self.config.device == "cpu" else "cuda")
        return select_workloads(self.problem, self._eval_config(), device)

    def _fallback_descriptor(self, found: Composition) -> Future:
        """The composite's descriptor and cell: its fallback's (the candidate with the best
        overall fitness, which it refines per shape), not captured again: the descriptor of
        whichever part the smallest workload dispatches to would say little about the rest,
        and in the fallback's cell the composite competes with what it set out to beat. When
        the fallback is the reference, which has no cell, the best kernel among the parts
        stands in for it."""
        described = found.fallback
        if described.cell is None:  # the reference (no kernel to describe): the best kernel
            described = max((part for part in found.parts if part.cell is not None),
                            key=lambda part: part.fitness, default=described)
        done: Future = Future()
        evidence = [f"composite of {len(found.parts)} parts, described as its "
                    f"{'fallback' if described is found.fallback else 'best kernel'} "
                    f"{described.name}", *described.descriptor.get("evidence", [])]
        done.set_result(({**described.descriptor, "evidence": evidence}, described.cell))
        return done

    # ---- judging -----------------------------------------------------------------------------

    def judge(self, solution: dict[str, Any], proposer: str) -> Verdict:
        """The harness's verdict on one candidate, stored in the archive."""
        return self.judge_batch([solution], proposer)[0]

    def judge_batch(self, solutions: list[dict[str, Any]], proposer: str,
                    described: list[Future] | None = None) -> list[Verdict]:
        """The verdicts on candidates judged side by side; those already in the store are read
        back instead of judged again. With `described` (their descriptors, known ahead) the
        budget is not checked: see compose."""
        verdicts: dict[int, Verdict] = {}
        new: list[int] = []
        for index, solution in enumerate(solutions):
            stored = archive.find(self.store, self.problem.name, solution)
            if stored is None:
                new.append(index)
                continue
            self.reused += 1
            verdicts[index] = Verdict(stored.status, stored.fitness, stored.fitness_kind,
                                      stored.latency_ms, stored.evidence)
        judged = self._judge_traces([solutions[index] for index in new], proposer,
                                    [described[index] for index in new] if described else None)
        for index, traces in zip(new, judged):
            verdicts[index] = verdict(traces)
        return [verdicts[index] for index in range(len(solutions))]

    def _judge_traces(self, solutions: list[dict[str, Any]], proposer: str,
                      described: list[Future] | None = None) -> list[list[Trace]]:
        """Judge new candidates (on the runner's slots when there is one), record each;
        `described`: their descriptors when known ahead (else captured beside the judging)."""
        if not solutions:
            return []
        if described is None:
            self._check_budget()
            described = [self._describing.submit(self._describe, solution)
                         for solution in solutions]
        measured = self._measure(solutions, screen=self.config.race)
        brief = [False] * len(solutions)
        if self.config.race:
            measured, brief = self._confirm(solutions, measured)
        for solution, traces, descriptor, screened in zip(solutions, measured, described, brief):
            self._record(solution, proposer, traces, descriptor, screened)
        return measured

    def _confirm(self, solutions: list[dict[str, Any]], measured: list[list[Trace]]
                 ) -> tuple[list[list[Trace]], list[bool]]:
        """Racing's second step: time in full the briefly timed candidates whose fitness comes
        within CONFIRM_MARGIN of the best known (the problem's best, this batch's brief and
        full fitnesses), until none is left; so the batch's best is a full timing even when the
        full timing of a brief leader came out lower than another's brief one. Their full
        traces replace the brief ones; the flags say which candidates keep a brief timing (the
        PASSED others)."""
        verdicts = [verdict(traces) for traces in measured]
        latest = [judged.fitness for judged in verdicts]  # brief, then full once timed so
        full: set[int] = set()
        confirmed = list(measured)
        while True:
            known = [f for f in latest if f is not None]
            if self.best_fitness is not None:
                known.append(self.best_fitness)
            if not known:
                break
            bar = max(known)
            again = [index for index, value in enumerate(latest) if index not in full
                     and value is not None and value >= bar - CONFIRM_MARGIN * abs(bar)]
            if not again:
                break
            for index, traces in zip(again, self._measure([solutions[i] for i in again],
                                                          screen=False)):
                confirmed[index] = traces
                latest[index] = verdict(traces).fitness
                self.confirmations.append((verdicts[index].fitness, latest[index]))
                full.add(index)
        self.confirmed += len(full)
        brief = [index not in full and judged.status == Status.PASSED.value
                 for index, judged in enumerate(verdicts)]
        self.screened += sum(brief)
        return confirmed, brief

    def _measure(self, solutions: list[dict[str, Any]], screen: bool) -> list[list[Trace]]:
        """The harness's traces of each solution (timed briefly with `screen`), nothing
        recorded."""
        if not solutions:
            return []
        if self.runner is None:
            return [evaluate(self.problem, parse_solution(solution), self._eval_config(screen))
                    for solution in solutions]
        return self._run_batch(solutions, screen)

    def _run_batch(self, solutions: list[dict[str, Any]], screen: bool) -> list[list[Trace]]:
        """Each candidate as one unit of the runner, all submitted before any is waited for."""
        from solforge.runners import EvalTask, failure_traces

        config = replace(self._eval_config(screen), device=self.runner.machine.device_type)
        tasks = {str(index): EvalTask(self.address, config, solution, key=str(index))
                 for index, solution in enumerate(solutions)}
        for task in tasks.values():
            self.runner.submit(task)
        measured: dict[str, list[Trace]] = {}
        while len(measured) < len(tasks):
            result = self.runner.next_result()
            if result is None:
                raise OptimizeError("the runner lost units it was given")
            traces = list(result.traces)
            if result.error is not None:  # a malformed candidate: judged as failing to build
                traces = list(failure_traces(result.task, self.runner.machine,
                                             Status.COMPILE_ERROR, result.error))
            self.report(f"{result.task.label}: judged on {result.slot} in "
                        f"{result.seconds:.1f} s")
            measured[result.task.key] = traces
        return [measured[key] for key in tasks]

    def _record(self, solution: dict[str, Any], proposer: str, traces: list[Trace],
                described: Future | None = None, screened: bool = False) -> None:
        """Store one judged candidate; `described` is its descriptor captured ahead;
        `screened`: its traces are a brief timing (racing), marked so in the store."""
        from solforge.forge.llm import attempt_from_traces

        self.judged += 1
        judged = verdict(traces)
        previous = self.best_fitness
        attempt = attempt_from_traces(solution, traces)
        if judged.fitness is not None and self._profiles(proposer):
            attempt = replace(attempt, profile=self._profile_feedback(solution))
        self.attempts.append(attempt)
        descriptor, cell = {}, None
        if judged.fitness is not None:
            descriptor, cell = (described.result() if described is not None
                                else self._describe(solution))
        elif described is not None:
            described.cancel()
        record = archive.CandidateRecord(
            problem=self.problem.name, name=solution.get("name", "?"), proposer=proposer,
            solution=solution, status=judged.status, fitness=judged.fitness,
            fitness_kind=judged.kind, latency_ms=judged.latency_ms, cell=cell,
            descriptor=descriptor, evidence=judged.evidence, params={})
        candidate_id = archive.add_candidate(self.store, record)
        archive.record_workloads(self.store, candidate_id, workload_results(traces))
        if screened:
            archive.mark_screened(self.store, candidate_id)
        if judged.status == Status.REWARD_HACK.value:
            self.hacks += 1
            self.report(f"{record.name}: REWARD_HACK ({(judged.evidence or '')[:120]})")
        elif judged.fitness is not None and cell is not None:
            archive.offer_elite(self.store, self.problem.name, cell, candidate_id,
                                judged.fitness)
            self._announce(record, judged)
        else:
            self.report(f"{record.name}: {judged.status}")
        if self._ahead_root is not None:  # its worker has run: the kernels kept ahead are done
            jit_ahead.discard(self._ahead_root, parse_solution(solution))
        gained = cell is not None and _gain(judged.fitness, previous)  # an elite that rose
        self.without_gain = 0 if gained else self.without_gain + 1

    def _profiles(self, proposer: str) -> bool:
        """Whether a passing candidate is profiled: only for the model's feedback, on a GPU."""
        from solforge.forge.ncu import ncu_available

        return (self.config.ncu and proposer.startswith("llm:") and
                self.config.device != "cpu" and ncu_available())

    def _profile_feedback(self, solution: dict[str, Any]) -> str:
        """Nsight Compute's metrics of the candidate on the largest workload, as prompt text."""
        from solforge.forge.ncu import profile_solution

        largest = max(self.problem.workloads, key=self.problem.input_elements)
        alone = self.runner.exclusive_device() if self.runner else contextlib.nullcontext()
        with alone:  # its replays would slow a unit timed on the GPU meanwhile
            profile = profile_solution(solution, self.problem.root, largest.uuid)
        if profile.error is not None:
            self.report(f"{solution.get('name')}: no ncu metrics ({profile.error[:200]})")
        return profile.feedback()

    def _describe(self, solution: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        from solforge.forge.capture import DescriptorError
        from solforge.forge.descriptors import describe_solution

        workload = self.problem.smallest_workload()
        device = "cpu" if self.config.device == "cpu" else "cuda"
        parsed = parse_solution(solution)
        if self._ahead_root is not None:  # first: the worker may start before the description
            self._compile_ahead(parsed)
        try:
            found = describe_solution(parsed, self.problem, workload, device=device)
        except DescriptorError as exc:
            self.report(f"{solution.get('name')}: no descriptor ({exc}); kept out of the archive")
            return {}, None
        descriptor = {"memory_path": found.memory_path, "compute_path": found.compute_path,
                      "parallel": found.parallel, "tile_class": found.tile_class,
                      "evidence": list(found.evidence)}
        return descriptor, "/".join(found.cell())

    def _compile_ahead(self, solution: Solution) -> None:
        """Compile the candidate's kernels for every workload its worker will time, for it to
        find on disk (capture.compile_ahead); a failure only leaves them to the worker."""
        from solforge.forge.capture import compile_ahead

        workloads = select_workloads(self.problem, self._eval_config(), torch.device("cuda"))
        try:
            compile_ahead(solution, self.problem, workloads,
                          partial(self._keep_ahead, solution=solution))
        except (OSError, SolforgeError) as exc:
            self.report(f"{solution.name}: nothing compiled ahead ({exc})")

    def _keep_ahead(self, cache: Path, solution: Solution) -> None:
        """Keep the kernels compiled ahead, for the candidate's worker to find
        (harness/sandbox/jit_ahead.py): its Triton JIT then compiles none of them again."""
        if jit_ahead.keep(cache, self._ahead_root, solution):
            self._kept_ahead.add(jit_ahead.folder(self._ahead_root, solution))

    def _discard_ahead(self) -> None:
        """Remove what this run kept ahead and no worker took (a candidate judged before its
        description ended, or a run cut short)."""
        for folder in list(self._kept_ahead):
            shutil.rmtree(folder, ignore_errors=True)
        self._kept_ahead.clear()

    def _announce(self, record: archive.CandidateRecord, judged: Verdict) -> None:
        improved = self.best_fitness is None or judged.fitness > self.best_fitness
        if improved:
            self.best_fitness = judged.fitness
        label = "S" if judged.kind == "sol_score" else "speedup over T_b"
        mark = "new best" if improved else "passed"
        self.report(f"{record.name}: {mark}, {label} {fitness(judged.fitness)} "
                    f"(T_k {judged.latency_ms:.4g} ms) in cell {record.cell}")

    def _eval_config(self, screen: bool = False) -> EvalConfig:
        """The harness's settings: on the CPU the smallest workload only; with `screen`, the
        candidate timed briefly (racing)."""
        config = EvalConfig(device=self.config.device, hardware=self.config.hardware,
                            baseline=self.config.baseline,
                            smallest=1 if self.config.device == "cpu" else None, screen=screen)
        if self.config.cache_dir is not None:
            config = replace(config, cache_dir=self.config.cache_dir)
        return config

    def _profile(self) -> HardwareProfile:
        """The profile fitness is scored on: the named one, else the GPU the runner's units
        run on (or, without a runner, this process's device)."""
        from solforge.defaults import resolve_device, resolve_profile, run_profile

        if self.runner is not None:
            return run_profile(self.config.hardware, self.runner.machine.profile)
        return resolve_profile(self.config.hardware, resolve_device(self.config.device))

    def _check_budget(self) -> None:
        if self.config.budget is not None and self.judged >= self.config.budget:
            raise _Exhausted
        self._check_time()
        if self.config.patience is not None and self.without_gain >= self.config.patience:
            raise _Stalled

    def _check_time(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.out_of_time = True
            raise _Exhausted

    def _budget_left(self) -> int:
        if self.config.budget is None:
            return 10_000  # the time limit stops the search
        return max(self.config.budget - self.judged, 0)

    def _remaining_budget(self, templates_left: int) -> int:
        return max(1, self._budget_left() // templates_left)


def _outcome(judged: Verdict) -> str:
    """A judged candidate in a report line: its status and fitness, or why it failed."""
    shown = (f"fitness {fitness(judged.fitness)}" if judged.fitness is not None
             else (judged.evidence or "")[:120])
    return f"{judged.status}, {shown}"


def _best_fitness(elites: list[archive.Elite]) -> float | None:
    return elites[0].fitness if elites else None


def _gain(fitness: float | None, best: float | None) -> bool:
    """Whether `fitness` beats the best so far by more than MIN_GAIN (any fitness beats none)."""
    if fitness is None:
        return False
    return best is None or fitness > best + MIN_GAIN * abs(best)
