"""The LLM proposer against a local OpenAI-compatible server (tests/openai_server.py): requests
through the real `openai` client, retries, token accounting, parsing answers into solutions that
the harness passes on the CPU, feedback from failures, and the meta-prompt bandit and rewrites."""

from __future__ import annotations

import datetime
import email.utils
import importlib.util
import random
from dataclasses import replace

import pytest
from harness_corpus import PROBLEMS, short_limits
from openai_server import (
    BAD_REQUEST,
    BROKEN,
    GARBAGE,
    RATE_LIMIT,
    REWRITTEN_COMPONENT,
    SERVER_ERROR,
    FakeOpenAI,
)

from solforge.data.solution import parse_solution
from solforge.data.trace import Correctness, Environment, Evaluation, Status, Trace
from solforge.forge.llm import (
    PARSE_ERROR,
    LlmAttempt,
    LLMConfig,
    LLMConfigError,
    LLMError,
    LLMProposer,
    Parent,
    ParseError,
    attempt_from_proposal,
    attempt_from_traces,
    solution_from_answer,
)
from solforge.forge.llm.client import ChatClient, backoff_s, parse_retry_after
from solforge.forge.llm.components import BUILT_IN, SLOTS, STRATEGIES
from solforge.forge.llm.config import api_key
from solforge.forge.llm.metaprompt import PromptVariant, choose_variants, reward_of
from solforge.forge.llm.parse import code_blocks
from solforge.forge.llm.prompt import PromptError, build_prompt, prompt_digest
from solforge.hardware.load import load_profile
from solforge.harness import EvalConfig, evaluate
from solforge.problem import load_problem
from solforge.solar import analyze_workload
from solforge.store import Store
from solforge.store.llm_records import (
    PROPOSE,
    REWRITE,
    active_components,
    components,
    llm_calls,
    reward_components,
    seed_components,
)

SMALL = PROBLEMS / "rmsnorm_small"
COMPONENTS = {slot: f"advice for {slot}" for slot in SLOTS}


@pytest.fixture(scope="module")
def problem():
    return load_problem(SMALL)


@pytest.fixture(scope="module")
def analysis(problem):
    return analyze_workload(problem, problem.smallest_workload(), load_profile("H200"))


@pytest.fixture
def server():
    with FakeOpenAI(retry_after="7") as fake:
        yield fake


@pytest.fixture
def store(tmp_path):
    return Store(f"sqlite:///{tmp_path / 'forge.db'}")


@pytest.fixture
def waits():
    return []


@pytest.fixture
def make_proposer(server, store, waits, monkeypatch):
    monkeypatch.setenv("SOLFORGE_LLM_API_KEY", "sk-test")

    def make(**overrides) -> LLMProposer:
        config = replace(LLMConfig(base_url=server.base_url, model="test-model", seed=0,
                                   max_attempts=4, backoff_s=0.5, timeout_s=10.0), **overrides)
        return LLMProposer(config, store, ChatClient(config, sleep=waits.append))

    return make


def _cpu_config(tmp_path) -> EvalConfig:
    return EvalConfig(device="cpu", baseline="eager", smallest=1, secret=7,
                      limits=short_limits(), cache_dir=tmp_path / "cache")


def _parent(name: str, score: float | None, latency_ms: float | None, lines: int = 5) -> Parent:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines))
    source = f"import triton\n\n\ndef run(hidden_states, norm_weight, eps, output):\n{body}"
    solution = {"name": name, "definition": "rmsnorm_small", "author": "tests",
                "spec": {"languages": ["triton"], "entry_point": "kernel.py::run",
                         "destination_passing_style": True},
                "sources": [{"path": "kernel.py", "content": source}]}
    return Parent(name, solution, score, latency_ms, {"memory": "vector16", "parallel": "tile"})


# -- the client --------------------------------------------------------------------------------

def test_a_proposal_goes_through_the_openai_client_and_its_cost_is_stored(
        make_proposer, server, store, problem, analysis):
    proposal, = make_proposer().propose(problem, analysis, [], [])
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["authorization"] == "Bearer sk-test"
    assert request["body"]["model"] == "test-model"
    assert "# Problem: rmsnorm_small" in request["body"]["messages"][1]["content"]
    assert proposal.solution["spec"]["entry_point"] == "kernel.py::run"
    assert proposal.solution["author"] == "test-model"
    call, = llm_calls(store)
    assert call.id == proposal.call_id
    assert call.purpose == PROPOSE and call.status == "ok" and call.attempts == 1
    assert call.prompt_tokens == server.usages[0]["prompt_tokens"]
    assert call.completion_tokens == server.usages[0]["completion_tokens"]
    assert call.latency_s > 0
    assert call.prompt_hash == prompt_digest(request["body"]["messages"])
    assert "@triton.jit" in call.response
    assert call.solution_name == proposal.solution["name"]
    assert tuple(call.components) == proposal.components
    assert len(proposal.components) == len(SLOTS)


def test_the_api_key_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("SOLFORGE_LLM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert api_key() == "none"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert api_key() == "sk-openai"
    monkeypatch.setenv("SOLFORGE_LLM_API_KEY", "sk-solforge")
    assert api_key() == "sk-solforge"


def test_rate_limits_and_server_errors_are_retried_with_backoff(
        make_proposer, server, store, waits, problem, analysis):
    server.then(RATE_LIMIT, SERVER_ERROR)
    proposal, = make_proposer().propose(problem, analysis, [], [])
    assert proposal.solution is not None
    assert len(server.requests) == 3
    assert waits == [7.0, 1.0]  # the server's Retry-After, then 0.5 s doubled
    call, = llm_calls(store)
    assert call.attempts == 3
    assert [r["reason"][:8] for r in call.retries] == ["HTTP 429", "HTTP 500"]
    assert [r["wait_s"] for r in call.retries] == waits


def test_an_endpoint_that_keeps_failing_raises_after_the_last_attempt(
        make_proposer, server, store, waits, problem, analysis):
    server.then(*[SERVER_ERROR] * 3)
    with pytest.raises(LLMError, match="HTTP 500"):
        make_proposer(max_attempts=3).propose(problem, analysis, [], [])
    assert len(server.requests) == 3
    assert waits == [0.5, 1.0]
    call, = llm_calls(store)
    assert call.status == "failed" and call.attempts == 3 and call.response is None


def test_a_bad_request_is_not_retried(make_proposer, server, store, problem, analysis):
    server.then(BAD_REQUEST)
    with pytest.raises(LLMError, match="HTTP 400"):
        make_proposer().propose(problem, analysis, [], [])
    assert len(server.requests) == 1


def test_retry_after_as_seconds_or_date_and_the_backoff_cap():
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    later = email.utils.format_datetime(now + datetime.timedelta(seconds=30), usegmt=True)
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after(later, now) == 30.0
    assert parse_retry_after("soon") is None
    config = LLMConfig(base_url="http://x/v1", model="m", backoff_s=2.0, max_backoff_s=10.0)
    assert [backoff_s(k, None, config) for k in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 10.0]
    assert backoff_s(1, 600.0, config) == 10.0


def test_impossible_settings_are_refused():
    with pytest.raises(LLMConfigError, match="max_attempts"):
        LLMConfig(base_url="http://x/v1", model="m", max_attempts=0)
    with pytest.raises(LLMConfigError, match="base URL"):
        LLMConfig(base_url="", model="m")


# -- answers, the harness and feedback ---------------------------------------------------------

@pytest.mark.slow
def test_the_proposed_kernel_passes_the_harness_on_the_cpu(
        make_proposer, store, problem, analysis, tmp_path):
    proposer = make_proposer()
    proposal, = proposer.propose(problem, analysis, [], [])
    traces = evaluate(problem, parse_solution(proposal.solution), _cpu_config(tmp_path))
    assert [t.status for t in traces] == [Status.PASSED]
    # Correct, but the interpreter is slower than eager PyTorch: half a reward, not one.
    assert proposer.record_outcome(proposal, traces) == 0.5
    used = [c for c in components(store) if c.id in proposal.components]
    assert [(c.pulls, c.reward_sum) for c in used] == [(1, 0.5)] * len(SLOTS)
    assert llm_calls(store)[0].reward == 0.5


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="needs openai")
def test_the_proposed_kernel_passes_the_harness_on_the_gpu(make_proposer, problem, analysis,
                                                            tmp_path):
    """The test server's kernel compiled for real (not interpreted), on every workload."""
    proposal, = make_proposer().propose(problem, analysis, [], [])
    config = EvalConfig(device="cuda", baseline="eager", secret=7, limits=short_limits(),
                        cache_dir=tmp_path / "cache")
    traces = evaluate(problem, parse_solution(proposal.solution), config)
    assert [t.status for t in traces] == [Status.PASSED] * len(problem.workloads)


@pytest.mark.slow
def test_a_kernel_that_does_not_compile_becomes_feedback_for_the_next_prompt(
        make_proposer, server, problem, analysis, tmp_path):
    server.then(BROKEN)
    proposer = make_proposer()
    proposal, = proposer.propose(problem, analysis, [], [])
    traces = evaluate(problem, parse_solution(proposal.solution), _cpu_config(tmp_path))
    assert traces[0].status is not Status.PASSED
    attempt = attempt_from_traces(proposal.solution, traces)
    assert "rsqrt_of" in attempt.message
    assert proposer.record_outcome(proposal, traces) == 0.0
    proposer.propose(problem, analysis, [], [attempt])
    prompt = server.requests[-1]["body"]["messages"][1]["content"]
    assert f"{proposal.solution['name']}: {attempt.status}" in prompt
    assert "has no attribute 'rsqrt_of'" in prompt


def test_an_answer_without_code_becomes_parse_error_feedback(
        make_proposer, server, store, problem, analysis):
    server.then(GARBAGE)
    proposer = make_proposer()
    proposal, = proposer.propose(problem, analysis, [], [])
    assert proposal.solution is None
    assert "no ```python code block" in proposal.parse_error
    assert llm_calls(store)[0].parse_error == proposal.parse_error
    attempt = attempt_from_proposal(proposal)
    assert attempt.status == PARSE_ERROR
    assert proposer.record_outcome(proposal, []) == 0.0
    proposer.propose(problem, analysis, [], [attempt])
    assert proposal.parse_error in server.requests[-1]["body"]["messages"][1]["content"]


def test_the_entry_file_is_the_largest_block_with_run_and_named_blocks_join_it(problem):
    answer = (
        "Usage example:\n```python\nrun(x, w, 1e-5, out)\n```\n"
        "A first try:\n```python\nimport triton\n\n@triton.jit\ndef k(x):\n    pass\n\n"
        "def run(a, b, c, d):\n    k[(1,)](a)\n```\n"
        "The final version:\n```python\nimport triton\nfrom helpers import launch\n\n"
        "@triton.jit\ndef k(x):\n    pass\n\n\ndef run(a, b, c, d):\n    launch(k, a)\n"
        "    return None\n```\n"
        "**helpers.py**\n```python\ndef launch(kernel, x):\n    kernel[(1,)](x)\n```\n"
        "```py\n# file: notes.py\nNOTE = 'run(...) is in kernel.py'\n```\n")
    solution = solution_from_answer(answer, problem, "m")
    paths = [s["path"] for s in solution["sources"]]
    assert paths == ["kernel.py", "helpers.py", "notes.py"]
    assert "from helpers import launch" in solution["sources"][0]["content"]
    assert solution["spec"] == {"languages": ["triton"], "entry_point": "kernel.py::run",
                                "destination_passing_style": True}
    assert parse_solution(solution).entry_point == "kernel.py::run"


def test_an_unclosed_fence_still_counts():
    blocks = code_blocks("Here:\n```python\nimport triton\ndef run():\n    pass\n")
    assert blocks[0].code.endswith("pass\n")


@pytest.mark.parametrize(("answer", "reason"), [
    ("No code, sorry.", "no ```python code block"),
    ("```python\ndef helper():\n    '''def run(x): ...'''\n```", "defines a top-level"),
    ("```python\ndef run(x:\n    pass\n```", "syntax errors (line 1"),
    ("```python\nimport torch\n\ndef run(x, out):\n    out.copy_(x)\n```", "no @triton.jit"),
])
def test_unusable_answers_say_what_is_missing(problem, answer, reason):
    with pytest.raises(ParseError, match=reason.replace("(", r"\(")):
        solution_from_answer(answer, problem, "m")


def test_feedback_tells_a_hack_first_and_keeps_the_mismatch_statistics(problem, analysis):
    def trace(status: Status, **fields) -> Trace:
        evaluation = Evaluation(status=status, environment=Environment("CPU_x86_64"),
                                timestamp="", **fields)
        return Trace("rmsnorm_small", "cheat", {"uuid": "w"}, evaluation)

    mismatch = Correctness(max_relative_error=0.5, max_absolute_error=2.0, has_nan=True,
                           matched_ratio=0.75)
    traces = [trace(Status.INCORRECT_NUMERICAL, log="outputs differ", correctness=mismatch),
              trace(Status.REWARD_HACK, evidence="the output was cached")]
    attempt = attempt_from_traces(_parent("cheat", None, None).solution, traces)
    assert (attempt.status, attempt.message) == ("REWARD_HACK", "the output was cached")
    assert (attempt.passed, attempt.workloads, attempt.latency_ms) == (0, 2, None)
    prompt = build_prompt(problem, analysis, [], [attempt], COMPONENTS, 8000).user
    assert "### cheat: REWARD_HACK (0/2 workloads passed)" in prompt
    assert ("Worst mismatch: max abs error 2, max rel error 0.5, 75.00% of elements within "
            "tolerance, the output holds NaN.") in prompt
    assert "def run(hidden_states, norm_weight, eps, output):" in prompt  # its source


# -- the prompt --------------------------------------------------------------------------------

def test_the_prompt_states_the_problem_the_bound_and_the_format(problem, analysis):
    prompt = build_prompt(problem, analysis, [], [], COMPONENTS, 8000)
    assert "advice for strategies" in prompt.system
    assert "- hidden_states: [num_tokens, hidden_size] bfloat16 (here [8, 256])" in prompt.user
    assert "- eps: a Python scalar (float32)" in prompt.user
    assert "def run(hidden_states, norm_weight, eps, output) -> None" in prompt.user
    assert "destination-passing style" in prompt.user
    assert f"T_SOL = {analysis.t_sol_ms:.4g} ms: memory-bound (DRAM)" in prompt.user
    assert problem.definition.reference.strip() in prompt.user


def test_the_prompt_keeps_the_best_parents_and_the_newest_feedback_within_budget(
        problem, analysis):
    parents = [_parent("slow", 0.55, 2.0, 100), _parent("best", 0.9, 0.5, 100),
               _parent("middle", 0.7, 1.0, 100)]
    attempts = [LlmAttempt("old", "RUNTIME_ERROR", "old failure " * 50, workloads=2),
                LlmAttempt("new", "COMPILE_ERROR", "x" * 5000, workloads=2)]
    fixed = build_prompt(problem, analysis, [], [], COMPONENTS, 100_000).tokens
    budget = fixed + 800
    prompt = build_prompt(problem, analysis, parents, attempts, COMPONENTS, budget)
    assert prompt.tokens <= budget
    assert prompt.parents == ("best",)
    assert prompt.attempts == 1
    assert "### new: COMPILE_ERROR (0/2 workloads passed)" in prompt.user
    assert "characters cut" in prompt.user
    roomy = build_prompt(problem, analysis, parents, attempts, COMPONENTS, 100_000)
    assert roomy.parents == ("best", "middle", "slow") and roomy.attempts == 2
    assert roomy.user.index("### new:") < roomy.user.index("### old:")
    with pytest.raises(PromptError, match="over the budget"):
        build_prompt(problem, analysis, parents, attempts, COMPONENTS, fixed // 2)


# -- rewards, the bandit and rewrites ----------------------------------------------------------

def test_rewards_follow_the_outcome():
    parent = _parent("p", 0.7, 1.0)
    passed = LlmAttempt("a", "PASSED", workloads=2, passed=2, latency_ms=0.8, baseline_ms=2.0,
                        sol_score=0.75)
    assert reward_of(passed, parent) == 1.0
    assert reward_of(replace(passed, sol_score=0.65), parent) == 0.5
    assert reward_of(replace(passed, passed=1, status="INCORRECT_NUMERICAL"), parent) == 0.0
    assert reward_of(LlmAttempt("h", "REWARD_HACK", "evidence", workloads=2), parent) == 0.0
    on_cpu = replace(passed, sol_score=None)  # no S: T_k against the parent's, or T_b
    assert reward_of(on_cpu, _parent("p", None, 1.0)) == 1.0
    assert reward_of(on_cpu, _parent("p", None, 0.5)) == 0.5
    assert reward_of(on_cpu, None) == 1.0
    assert reward_of(replace(on_cpu, latency_ms=3.0), None) == 0.5


def test_the_bandit_shifts_towards_the_variant_with_higher_rewards():
    store = Store("sqlite://")  # in memory: 300 commits
    seed_components(store, [(STRATEGIES, "good", "a"), (STRATEGIES, "fair", "b"),
                            (STRATEGIES, "poor", "c")])
    success_rate = {"good": 0.8, "fair": 0.4, "poor": 0.1}
    draws, outcomes = random.Random(0), random.Random(1)
    picks = []
    for _ in range(150):
        variants = [PromptVariant.from_row(row) for row in active_components(store)]
        chosen = choose_variants(variants, draws)[STRATEGIES]
        picks.append(chosen.name)
        reward = 1.0 if outcomes.random() < success_rate[chosen.name] else 0.0
        reward_components(store, [chosen.id], reward)
    assert set(picks[:30]) == {"good", "fair", "poor"}  # it explores first
    assert picks[-50:].count("good") >= 40
    pulls = {row.name: row.pulls for row in components(store)}
    assert pulls["good"] > pulls["fair"] > pulls["poor"]


def test_a_rewrite_replaces_the_weakest_variant_with_a_child(make_proposer, server, store):
    proposer = make_proposer(min_pulls_to_rewrite=2)
    rows = {(row.slot, row.name): row for row in components(store)}
    assert len(rows) == len(BUILT_IN)
    weak = rows[(STRATEGIES, "compute-bound")]
    others = [row.id for row in rows.values() if row.id != weak.id]
    for _ in range(2):
        reward_components(store, [weak.id], 0.0)
        reward_components(store, others, 1.0)
    new_id = proposer.rewrite_weakest()
    request = server.requests[-1]["body"]["messages"][1]["content"]
    assert weak.text.strip() in request
    child = next(row for row in components(store) if row.id == new_id)
    assert (child.slot, child.parent_id, child.generation) == (STRATEGIES, weak.id, 1)
    assert child.text == REWRITTEN_COMPONENT
    assert child.name.startswith("compute-bound@")
    assert weak.id not in {row.id for row in active_components(store)}
    call, = llm_calls(store, REWRITE)
    assert call.components == [weak.id]


def test_outcomes_trigger_a_rewrite_every_n_proposals(make_proposer, server, store, problem,
                                                      analysis):
    proposer = make_proposer(rewrite_every=2, min_pulls_to_rewrite=1)
    server.then(GARBAGE, GARBAGE)
    first, = proposer.propose(problem, analysis, [], [])
    proposer.record_outcome(first, [])
    assert llm_calls(store, REWRITE) == []
    second, = proposer.propose(problem, analysis, [], [])
    proposer.record_outcome(second, [])
    assert len(llm_calls(store, REWRITE)) == 1
    assert any(row.parent_id is not None for row in components(store))
