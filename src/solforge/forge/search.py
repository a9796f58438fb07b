"""Parameter search inside one template: which setting of its knobs scores best on a problem.

The valid space is enumerated first: every point of the template's space that its `valid`
accepts for every workload of the problem, so nothing that cannot fit an H200 block (or cannot
be correct) is ever rendered, compiled or run. Then:
- when the valid space is small (at most EXHAUSTIVE_LIMIT settings) and the budget covers it,
  every setting is tried, in the template's order;
- otherwise Optuna's TPE sampler proposes settings through its ask/tell interface (optuna is
  imported here only). A proposal outside the valid space, or one already tried, is replaced
  by the nearest untried valid setting (fewest steps along each knob's ordered choices); that
  setting is what gets scored and recorded in the study, so the sampler learns from settings
  that were really measured, and every proposal costs exactly one evaluation.

The caller supplies the objective: `objective(solution_dict) -> float | None`, higher is
better (the harness's score of the rendered candidate), None for a candidate that failed.
This module never times anything itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from solforge.forge.templates.template import Params, ParamValue, Template
from solforge.problem.problem import Problem

EXHAUSTIVE_LIMIT = 32
SCORED, FAILED = "scored", "failed"

Objective = Callable[[dict[str, Any]], float | None]


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
           seed: int = 0) -> list[Trial]:
    """Up to `budget` trials of distinct valid settings, in the order they were evaluated."""
    space = valid_space(template, problem)
    if len(space) <= min(EXHAUSTIVE_LIMIT, budget):
        return [score_setting(template, problem, objective, params) for params in space]
    return _tpe_search(template, problem, objective, space, budget, seed)


def best_trial(trials: Sequence[Trial]) -> Trial | None:
    scored = [trial for trial in trials if trial.status == SCORED]
    return max(scored, key=lambda trial: trial.value, default=None)


def score_setting(template: Template, problem: Problem, objective: Objective,
                  params: Params) -> Trial:
    """Render one setting and hand it to the objective."""
    value = objective(template.render(params, problem))
    return Trial(dict(params), value, FAILED if value is None else SCORED)


def _tpe_search(template: Template, problem: Problem, objective: Objective,
                space: list[dict[str, ParamValue]], budget: int, seed: int) -> list[Trial]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {name: optuna.distributions.CategoricalDistribution(choices)
                     for name, choices in template.space.items()}
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    untried = list(space)
    trials: list[Trial] = []
    while untried and len(trials) < budget:
        asked = study.ask(distributions)
        chosen = _nearest(template, asked.params, untried)
        untried.remove(chosen)
        trial = score_setting(template, problem, objective, chosen)
        trials.append(trial)
        state = (optuna.trial.TrialState.COMPLETE if trial.status == SCORED
                 else optuna.trial.TrialState.FAIL)
        if chosen == asked.params:
            study.tell(asked, trial.value, state=state)
            continue
        study.tell(asked, state=optuna.trial.TrialState.FAIL)
        study.add_trial(optuna.trial.create_trial(params=chosen, distributions=distributions,
                                                  value=trial.value, state=state))
    return trials


def _nearest(template: Template, proposed: Params,
             candidates: list[dict[str, ParamValue]]) -> dict[str, ParamValue]:
    """The candidate fewest choice-steps away from the proposal (the first on a tie)."""
    def steps(params: Params) -> int:
        return sum(abs(choices.index(params[name]) - choices.index(proposed[name]))
                   for name, choices in template.space.items())

    return min(candidates, key=steps)
