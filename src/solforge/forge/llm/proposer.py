"""The LLM proposer: prompt a model for new kernels and learn which prompts work.

    proposer = LLMProposer(LLMConfig(base_url="http://localhost:8000/v1", model="qwen3"), store)
    for proposal in proposer.propose(problem, analysis, parents, feedback):
        traces = evaluate(problem, parse_solution(proposal.solution), config)  # the loop's job
        proposer.record_outcome(proposal, traces)

Every call is stored (an LLMCall row: tokens, latency, retries, the response), whatever
became of it. A response with no usable code still yields a Proposal, with no solution and the
ParseError's message (attempt_from_proposal turns it into feedback for the next prompt); its
outcome, recorded like any other with no traces, is a zero reward. An endpoint that gives no
answer after its retries raises LLMError. The bandit's statistics and the components live in
the store, so every worker on the same store learns from all the others.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from solforge.data.trace import Trace
from solforge.errors import SolforgeError
from solforge.forge.llm.client import ChatClient, Completion
from solforge.forge.llm.components import BUILT_IN
from solforge.forge.llm.config import LLMConfig
from solforge.forge.llm.metaprompt import (
    PromptVariant,
    best_other,
    choose_variants,
    parse_rewrite,
    reward_of,
    rewrite_messages,
    rewrite_name,
    weakest_variant,
)
from solforge.forge.llm.parse import ParseError, solution_from_answer
from solforge.forge.llm.prompt import build_prompt, prompt_digest
from solforge.forge.llm.records import (
    LlmAttempt,
    Parent,
    Proposal,
    attempt_from_proposal,
    attempt_from_traces,
    parent_rank,
)
from solforge.problem.problem import Problem
from solforge.solar.analysis import Analysis
from solforge.store.llm_records import (
    PROPOSE,
    REWRITE,
    CallRecord,
    active_components,
    replace_component,
    reward_components,
    rewarded_proposals,
    save_call,
    seed_components,
    set_call_result,
    set_call_reward,
)
from solforge.store.store import Store


class LLMError(SolforgeError):
    """The model's endpoint gave no answer, after every retry."""


class LLMProposer:
    def __init__(self, config: LLMConfig, store: Store, client: ChatClient | None = None) -> None:
        self.config = config
        self.store = store
        self.client = client or ChatClient(config)
        self.rng = random.Random(config.seed)
        seed_components(store, BUILT_IN)

    def propose(self, problem: Problem, analysis: Analysis, parents: Sequence[Parent],
                feedback: Sequence[LlmAttempt]) -> list[Proposal]:
        """`config.samples` proposals; `feedback` in the order the attempts were made."""
        return [self._propose_one(problem, analysis, parents, feedback)
                for _ in range(self.config.samples)]

    def record_outcome(self, proposal: Proposal, traces: Sequence[Trace]) -> float:
        """Reward the components the proposal's prompt used (traces: the harness's, one per
        workload; none for a proposal without a solution); returns the reward. Rewrites the
        weakest component when one is due."""
        if proposal.solution is None:
            attempt = attempt_from_proposal(proposal)
        else:
            attempt = attempt_from_traces(proposal.solution, traces)
        reward = reward_of(attempt, proposal.parent)
        reward_components(self.store, proposal.components, reward)
        set_call_reward(self.store, proposal.call_id, reward)
        if self._rewrite_due():
            self.rewrite_weakest()
        return reward

    def rewrite_weakest(self) -> int | None:
        """Ask the model to rewrite the weakest component; the new variant's id, or None when
        no variant has enough outcomes yet or the answer held no usable text."""
        variants = self._variants()
        weak = weakest_variant(variants, self.config.min_pulls_to_rewrite)
        if weak is None:
            return None
        messages = rewrite_messages(weak, best_other(variants, weak))
        completion = self.client.complete(messages)
        call_id = self._save(REWRITE, None, messages, (weak.id,), completion)
        if not completion.ok:
            return None
        try:
            text = parse_rewrite(completion.text)
        except ParseError as exc:
            set_call_result(self.store, call_id, None, str(exc))
            return None
        return replace_component(self.store, weak.id, rewrite_name(weak, call_id), text)

    def _propose_one(self, problem: Problem, analysis: Analysis, parents: Sequence[Parent],
                     feedback: Sequence[LlmAttempt]) -> Proposal:
        chosen = choose_variants(self._variants(), self.rng)
        texts = {slot: variant.text for slot, variant in chosen.items()}
        prompt = build_prompt(problem, analysis, parents, feedback, texts,
                              self.config.token_budget)
        used = tuple(variant.id for variant in chosen.values())
        completion = self.client.complete(prompt.messages)
        call_id = self._save(PROPOSE, problem.name, prompt.messages, used, completion)
        if not completion.ok:
            raise LLMError(f"{self.config.model} at {self.config.base_url}: "
                           f"{completion.error} (after {completion.attempts} requests)")
        parent = min(parents, key=parent_rank, default=None)
        try:
            solution = solution_from_answer(completion.text, problem, self.config.model)
        except ParseError as exc:
            reason = _with_cut_note(str(exc), completion, self.config.max_tokens)
            set_call_result(self.store, call_id, None, reason)
            return Proposal(None, call_id, used, parent, parse_error=reason)
        set_call_result(self.store, call_id, solution["name"], None)
        return Proposal(solution, call_id, used, parent)

    def _variants(self) -> list[PromptVariant]:
        return [PromptVariant.from_row(row) for row in active_components(self.store)]

    def _rewrite_due(self) -> bool:
        every = self.config.rewrite_every
        return every > 0 and rewarded_proposals(self.store) % every == 0

    def _save(self, purpose: str, problem: str | None, messages: list[dict[str, str]],
              components: tuple[int, ...], completion: Completion) -> int:
        record = CallRecord(
            purpose=purpose, problem=problem, model=self.config.model,
            base_url=self.config.base_url, prompt_hash=prompt_digest(messages), prompt=messages,
            components=components, status="ok" if completion.ok else "failed",
            error=completion.error, attempts=completion.attempts,
            retries=[retry.to_dict() for retry in completion.retries],
            latency_s=completion.latency_s, prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens, response=completion.text)
        return save_call(self.store, record)


def _with_cut_note(reason: str, completion: Completion, max_tokens: int) -> str:
    if completion.finish_reason != "length":
        return reason
    return f"{reason} (the answer was cut at the limit of {max_tokens} tokens)"
