"""Parameter search: exhaustive on small valid spaces, Optuna TPE on large ones, never scoring
an invalid setting, and the objective always the caller's."""

from __future__ import annotations

import optuna
import pytest
from helpers import FIXTURES

from solforge.forge import search as search_module
from solforge.forge.search import FAILED, SCORED, best_trial, search, valid_space
from solforge.forge.templates import template_named
from solforge.forge.templates.template import Template
from solforge.problem.problem import load_problem

PROBLEM = load_problem(FIXTURES / "templates" /
                       "linear_bias_silu_ragged")


def _synthetic(space, too_big: int) -> Template:
    """A template whose settings are valid while X + Y <= too_big; it renders its settings."""
    def valid(params, problem, workload):
        return None if params["X"] + params["Y"] <= too_big else "X + Y too big"

    return Template(name="synthetic", family="test", space=space, applies=lambda d: True,
                    valid=valid, render=lambda params, problem: {"params": dict(params)})


LARGE = {"X": tuple(range(10)), "Y": tuple(range(10)), "Z": ("a", "b", "c", "d"),
         "W": (16, 32, 64, 128, 256)}  # 2000 settings, 1200 of them valid (X + Y <= 14)


def each(score):
    """A batch objective that scores its candidates one by one with `score`."""
    return lambda solutions: [score(solution) for solution in solutions]


def _bowl(solution) -> float:
    """Maximum 0 at X=7, Y=3, Z="c", W=64."""
    p = solution["params"]
    return -((p["X"] - 7) ** 2 + (p["Y"] - 3) ** 2 + 4 * (p["Z"] != "c") + abs(p["W"] - 64) / 16)


@pytest.fixture
def studies(monkeypatch) -> list:
    """Every Optuna study the search creates, as it creates them."""
    created = []
    create_study = optuna.create_study

    def spy(*args, **kwargs):
        created.append(create_study(*args, **kwargs))
        return created[-1]

    monkeypatch.setattr(optuna, "create_study", spy)
    return created


def test_small_valid_space_is_searched_exhaustively_in_order(monkeypatch):
    def no_sampler(*args, **kwargs):
        raise AssertionError("a small space must not need the sampler")

    monkeypatch.setattr(search_module, "_tpe_search", no_sampler)
    template = _synthetic({"X": (0, 1, 2), "Y": (0, 1, 2)}, too_big=2)
    seen = []

    def objective(solution):
        seen.append(solution["params"])
        return float(solution["params"]["X"])

    trials = search(template, PROBLEM, each(objective), budget=10, seed=0)
    valid = [{"X": x, "Y": y} for x in (0, 1, 2) for y in (0, 1, 2) if x + y <= 2]
    assert [trial.params for trial in trials] == valid == seen
    assert all(trial.status == SCORED for trial in trials)
    assert best_trial(trials).params == {"X": 2, "Y": 0}


def test_large_space_uses_tpe_and_finds_the_optimum_within_the_budget(studies):
    template = _synthetic(LARGE, too_big=14)
    scored = []

    def objective(solution):
        params = solution["params"]
        assert params["X"] + params["Y"] <= 14, "an invalid setting reached the objective"
        scored.append(tuple(params.values()))
        return _bowl(solution)

    trials = search(template, PROBLEM, each(objective), budget=100, seed=0)
    assert len(trials) == 100 and len(set(scored)) == 100  # every evaluation a new setting
    assert best_trial(trials).params == {"X": 7, "Y": 3, "Z": "c", "W": 64}
    # One study, told about every scored setting (its own proposals or their valid neighbours).
    (study,) = studies
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(tuple(t.params.values()) for t in complete) == sorted(scored)


def test_failed_candidates_are_recorded_and_never_best():
    template = _synthetic(LARGE, too_big=14)

    def objective(solution):
        return None if solution["params"]["Z"] == "c" else _bowl(solution)

    trials = search(template, PROBLEM, each(objective), budget=60, seed=3)
    failed = [trial for trial in trials if trial.status == FAILED]
    assert failed and all(trial.value is None for trial in failed)
    assert best_trial(trials).params["Z"] != "c"


def test_a_budget_smaller_than_the_space_uses_the_sampler_and_stops_there():
    template = _synthetic({"X": (0, 1, 2, 3), "Y": (0, 1, 2, 3)}, too_big=6)
    trials = search(template, PROBLEM, each(lambda solution: 1.0), budget=5, seed=1)
    assert len(trials) == 5
    assert len({tuple(trial.params.values()) for trial in trials}) == 5


def test_search_is_reproducible_for_a_seed():
    template = _synthetic(LARGE, too_big=14)
    first = search(template, PROBLEM, each(_bowl), budget=40, seed=7)
    again = search(template, PROBLEM, each(_bowl), budget=40, seed=7)
    assert [trial.params for trial in first] == [trial.params for trial in again]


def test_parallel_search_judges_batches_and_still_converges():
    template = _synthetic(LARGE, too_big=14)
    batches = []

    def objective(solutions):
        batches.append(len(solutions))
        return [_bowl(solution) for solution in solutions]

    trials = search(template, PROBLEM, objective, budget=98, seed=0, parallel=4)
    assert len(trials) == 98 and batches == [4] * 24 + [2]  # the last batch fits the budget
    assert len({tuple(trial.params.values()) for trial in trials}) == 98
    assert best_trial(trials).value >= -1.0  # within one step of the optimum

    small = _synthetic({"X": (0, 1, 2), "Y": (0, 1, 2)}, too_big=2)
    sizes = []

    def count(solutions):
        sizes.append(len(solutions))
        return [1.0] * len(solutions)

    trials = search(small, PROBLEM, count, budget=10, seed=0, parallel=4)
    assert sizes == [4, 2] and len(trials) == 6


def test_an_objective_that_loses_candidates_is_an_error():
    template = _synthetic({"X": (0, 1, 2), "Y": (0, 1, 2)}, too_big=2)
    with pytest.raises(ValueError, match="scored 1 of 3"):
        search(template, PROBLEM, lambda solutions: [1.0], budget=10, parallel=3)


@pytest.mark.parametrize("name", ["gemm", "gemm_tma"])
def test_valid_space_of_a_real_template_holds_only_valid_settings(name):
    template = template_named(name)
    space = valid_space(template, PROBLEM)
    everything = list(template.configurations())
    assert 0 < len(space) < len(everything)
    assert all(template.invalid_reason(params, PROBLEM) is None for params in space)
    rejected = [params for params in everything if params not in space]
    assert all(template.invalid_reason(params, PROBLEM) for params in rejected)


def _seeded(space, too_big: int, seeds) -> Template:
    plain = _synthetic(space, too_big)
    return Template(name=plain.name, family=plain.family, space=plain.space,
                    applies=plain.applies, valid=plain.valid, render=plain.render, seeds=seeds)


@pytest.mark.parametrize("space", [LARGE, {"X": (0, 1, 2), "Y": (0, 1, 2)}], ids=["tpe", "small"])
def test_valid_seeds_come_first_in_their_order(space):
    seeds = ({"X": 2, "Y": 0, "Z": "a", "W": 16}, {"X": 9, "Y": 9, "Z": "a", "W": 16},
             {"X": 0, "Y": 1, "Z": "b", "W": 32})  # the second is invalid (X + Y > 14)
    seeds = tuple({name: seed[name] for name in space} for seed in seeds)
    template = _seeded(space, 14 if "Z" in space else 2, seeds)
    trials = search(template, PROBLEM, each(lambda solution: 0.0), budget=6, seed=0,
                    parallel=4)
    assert [trial.params for trial in trials[:2]] == [seeds[0], seeds[2]]
    assert seeds[1] not in [trial.params for trial in trials]
    assert len({tuple(trial.params.values()) for trial in trials}) == len(trials)


def test_the_sampler_learns_from_the_seeds(studies):
    """The seeds are the study's first trials (told like any other), and TPE's random start is
    cut to a quarter of a small budget, so its model proposes most of a search of 12."""
    best = {"X": 7, "Y": 3, "Z": "c", "W": 64}
    trials = search(_seeded(LARGE, 14, (best,)), PROBLEM, each(_bowl), budget=12, seed=0)
    (study,) = studies
    assert study.trials[0].params == best and study.sampler._n_startup_trials == 3
    assert trials[0].params == best and best_trial(trials).params == best
    assert search_module.random_start(8) == 2 and search_module.random_start(400) == 10


def test_templates_sharing_a_space_draw_different_settings():
    first = search(_synthetic(LARGE, 14), PROBLEM, each(_bowl), budget=8, seed=0)
    other = _synthetic(LARGE, 14)
    renamed = Template(name="another", family=other.family, space=other.space,
                       applies=other.applies, valid=other.valid, render=other.render)
    second = search(renamed, PROBLEM, each(_bowl), budget=8, seed=0)
    assert [t.params for t in first] != [t.params for t in second]
