"""Parameter search inside one template: which setting of its knobs scores best on a problem.

The valid space is enumerated first: every point of the template's space that its `valid`
accepts for every workload of the problem, so nothing that cannot fit an H200 block (or cannot
be correct) is ever rendered, compiled or run. Then:
- the template's seeds (settings known to suit the target) that are valid come first, in their
  order, within the budget;
- when the valid space is small (at most EXHAUSTIVE_LIMIT settings) and the budget covers it,
  every setting is tried, in the template's order;
- otherwise Optuna's TPE sampler proposes settings through its ask/tell interface (optuna is
  imported here only). A proposal outside the valid space, or one already tried, is replaced
  by the nearest untried valid setting (fewest steps along each knob's ordered choices); that
  setting is what gets scored and recorded in the study, so the sampler learns from settings
  that were really measured, and every proposal costs exactly one evaluation. The seeds are
  queued in the study as its first trials, so it learns from them too. TPE starts from random
  settings (Optuna's default is 10) before its model proposes any; with a small budget that
  start is cut to a quarter of the budget (at least 2), or a search of 8 would be all random,
  and each template draws from a seed of its own, so templates sharing a space do not all
  try the same random settings.

The caller supplies the objective, which scores a batch: `objective([solution_dict, ...]) ->
[float | None, ...]`, higher is better (the harness's score of each rendered candidate), None
for a candidate that failed. A batch holds up to `parallel` settings, so a runner with several
slots (GPUs, cores, a Ray cluster) judges them side by side; TPE then has `parallel` trials
asked before any is told (Optuna's ask/tell allows that), and the exhaustive path walks the
space `parallel` settings at a time. This module never times anything itself.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from solforge.forge.templates.template import Params, ParamValue, Template
from solforge.problem.problem import Problem

EXHAUSTIVE_LIMIT = 32
SCORED, FAILED = "scored", "failed"

Objective = Callable[[list[dict[str, Any]]], list[float | None]]


@dataclass(frozen=True)
class Trial:
    params: dict[str, ParamValue]
    value: float | None  # None when the candidate failed
    status: str  # SCORED or FAILED


def valid_space(template: Template, problem: Problem) -> list[dict[str, ParamValue]]:
    """Every setting of the template that is valid on all of the problem's workloads."""
    return [params for params in template.configurations()
            if template.invalid_reason(params, problem) is None]


def search(template: Template, problem: Problem, objective: Objective, budget: int,
           seed: int = 0, parallel: int = 1) -> list[Trial]:
    """Up to `budget` trials of distinct valid settings, in the order they were evaluated,
    judged `parallel` at a time."""
    if parallel < 1:
        raise ValueError(f"parallel={parallel}: at least one evaluation at a time")
    space = valid_space(template, problem)
    seeds = [dict(s) for s in template.seeds if dict(s) in space][:budget]
    if len(space) <= min(EXHAUSTIVE_LIMIT, budget):
        ordered = seeds + [params for params in space if params not in seeds]
        trials: list[Trial] = []
        for start in range(0, len(ordered), parallel):
            trials += score_settings(template, problem, objective,
                                     ordered[start:start + parallel])
        return trials
    return _tpe_search(template, problem, objective, space, seeds, budget, seed, parallel)


def best_trial(trials: Sequence[Trial]) -> Trial | None:
    scored = [trial for trial in trials if trial.status == SCORED]
    return max(scored, key=lambda trial: trial.value, default=None)


def score_settings(template: Template, problem: Problem, objective: Objective,
                   settings: Sequence[Params]) -> list[Trial]:
    """Render a batch of settings and hand them to the objective together."""
    values = objective([template.render(params, problem) for params in settings])
    if len(values) != len(settings):
        raise ValueError(f"the objective scored {len(values)} of {len(settings)} candidates")
    return [Trial(dict(params), value, FAILED if value is None else SCORED)
            for params, value in zip(settings, values)]


def _tpe_search(template: Template, problem: Problem, objective: Objective,
                space: list[dict[str, ParamValue]], seeds: list[dict[str, ParamValue]],
                budget: int, seed: int, parallel: int) -> list[Trial]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {name: optuna.distributions.CategoricalDistribution(choices)
                     for name, choices in template.space.items()}
    sampler = optuna.samplers.TPESampler(seed=sampler_seed(seed, template.name),
                                         n_startup_trials=random_start(budget))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for params in seeds:
        study.enqueue_trial(params)
    untried = list(space)
    trials: list[Trial] = []
    while untried and len(trials) < budget:
        asked, chosen = [], []
        while untried and len(chosen) < min(parallel, budget - len(trials)):
            asked.append(study.ask(distributions))
            chosen.append(_nearest(template, asked[-1].params, untried))
            untried.remove(chosen[-1])
        batch = score_settings(template, problem, objective, chosen)
        for question, trial in zip(asked, batch):
            _tell(study, question, trial, distributions)
        trials += batch
    return trials


def random_start(budget: int) -> int:
    """TPE's random trials before its model proposes: Optuna's 10, or a quarter of a small
    budget (at least 2)."""
    return min(10, max(2, budget // 4))


def sampler_seed(seed: int, template: str) -> int:
    """The run's seed, made the template's own (stable across processes, unlike hash())."""
    return (seed + zlib.crc32(template.encode())) % 2**32


def _tell(study: Any, asked: Any, trial: Trial, distributions: dict[str, Any]) -> None:
    """Record a measured setting in the study: on the asked trial when it is what was measured,
    else as a trial of its own (and the asked one as failed, so it is not proposed again)."""
    import optuna

    state = (optuna.trial.TrialState.COMPLETE if trial.status == SCORED
             else optuna.trial.TrialState.FAIL)
    if trial.params == asked.params:
        study.tell(asked, trial.value, state=state)
        return
    study.tell(asked, state=optuna.trial.TrialState.FAIL)
    study.add_trial(optuna.trial.create_trial(params=trial.params, distributions=distributions,
                                              value=trial.value, state=state))


def _nearest(template: Template, proposed: Params,
             candidates: list[dict[str, ParamValue]]) -> dict[str, ParamValue]:
    """The candidate fewest choice-steps away from the proposal (the first on a tie)."""
    def steps(params: Params) -> int:
        return sum(abs(choices.index(params[name]) - choices.index(proposed[name]))
                   for name, choices in template.space.items())

    return min(candidates, key=steps)
