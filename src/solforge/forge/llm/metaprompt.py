"""Meta-prompt evolution (KernelFoundry, arXiv 2603.12440): a bandit over prompt components,
and rewrites of the weakest component by the model itself.

Each prompt takes one variant from each slot (philosophy, strategies, pitfalls). The choice is
Thompson sampling: every variant has a Beta(1 + rewards, 1 + pulls - rewards) posterior over its
success rate (rewards in [0, 1] count as fractional successes), a draw is taken from each, and
the highest draw wins. Thompson rather than UCB1 because several workers share the statistics:
UCB1 is deterministic given the counts, so every worker would send the same variant until the
outcomes came back; Thompson's draws spread them while still favouring what has worked.

The reward of a proposal (reward_of): 1 for a kernel that passes every workload and beats its
parent (higher S; where no S exists, as on a CPU, lower T_k; with no parent, the baseline: S > 0.5
or T_k < T_b), 0.5 for a kernel that passes but does not beat it, 0 for anything else (a wrong
answer, an error, a REWARD_HACK, an answer with no code). Half credit for correctness alone,
because a correct kernel is most of the work for a model and a component that keeps the model
correct is worth keeping even when it does not yet beat the elite.

Every so often the weakest variant (lowest posterior mean among those with enough outcomes) is
rewritten: the model sees its text, its statistics and the best variant of the same slot, and
answers with a new text, which becomes a new variant whose parent is the old one; the old one
is retired.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from solforge.forge.llm.components import SLOT_PURPOSES, SLOT_TITLES, SLOTS
from solforge.forge.llm.parse import ParseError
from solforge.forge.llm.records import LlmAttempt, Parent

if TYPE_CHECKING:
    from solforge.store.schema import PromptComponent

MAX_COMPONENT_CHARS = 4000  # a rewritten component; ~1000 tokens of the system message
_COMPONENT_TAG = re.compile(r"<component>(.*?)</component>", re.DOTALL)

REWRITE_ROLE = """\
You improve the instructions given to a model that writes Triton kernels for NVIDIA Hopper
GPUs. Each prompt it gets has three parts: an optimisation philosophy, a strategy library and
common pitfalls. Each part has several variants, and every prompt's outcome is scored: 1 for a
correct kernel faster than its parent, 0.5 for a correct kernel that is not faster, 0 for a
wrong kernel, an error, a cheat or an answer without code."""


@dataclass(frozen=True)
class PromptVariant:
    id: int
    slot: str
    name: str
    text: str
    pulls: int
    reward_sum: float
    generation: int

    @property
    def mean(self) -> float:
        """The posterior mean of the success rate under a Beta(1, 1) prior."""
        return (1.0 + self.reward_sum) / (2.0 + self.pulls)

    @classmethod
    def from_row(cls, row: PromptComponent) -> PromptVariant:
        return cls(row.id, row.slot, row.name, row.text, row.pulls, row.reward_sum,
                   row.generation)


def thompson_choice(variants: Sequence[PromptVariant], rng: random.Random) -> PromptVariant:
    """The variant with the highest draw from its Beta posterior."""
    draws = [rng.betavariate(1.0 + v.reward_sum, 1.0 + max(v.pulls - v.reward_sum, 0.0))
             for v in variants]
    return variants[draws.index(max(draws))]


def choose_variants(variants: Sequence[PromptVariant],
                    rng: random.Random) -> dict[str, PromptVariant]:
    """One variant per slot that has any."""
    chosen = {}
    for slot in SLOTS:
        in_slot = [v for v in variants if v.slot == slot]
        if in_slot:
            chosen[slot] = thompson_choice(in_slot, rng)
    return chosen


def reward_of(attempt: LlmAttempt, parent: Parent | None) -> float:
    if not attempt.all_passed:
        return 0.0
    return 1.0 if beats(attempt, parent) else 0.5


def beats(attempt: LlmAttempt, parent: Parent | None) -> bool:
    """Whether a passing attempt is faster than its parent (the baseline when it has none)."""
    if parent is None:
        if attempt.sol_score is not None:
            return attempt.sol_score > 0.5  # S = 0.5 is the baseline's own time
        return _faster(attempt.latency_ms, attempt.baseline_ms)
    if attempt.sol_score is not None and parent.sol_score is not None:
        return attempt.sol_score > parent.sol_score
    return _faster(attempt.latency_ms, parent.latency_ms)


def weakest_variant(variants: Sequence[PromptVariant], min_pulls: int) -> PromptVariant | None:
    """The lowest posterior mean among variants with at least `min_pulls` outcomes."""
    judged = [v for v in variants if v.pulls >= min_pulls]
    if not judged:
        return None
    return min(judged, key=lambda v: (v.mean, -v.pulls, v.id))


def best_other(variants: Sequence[PromptVariant], weak: PromptVariant) -> PromptVariant | None:
    """The best other variant of the weak one's slot, the example its rewrite is shown."""
    others = [v for v in variants if v.slot == weak.slot and v.id != weak.id]
    return max(others, key=lambda v: (v.mean, v.pulls), default=None)


def rewrite_messages(weak: PromptVariant, best: PromptVariant | None) -> list[dict[str, str]]:
    lines = [f'The part "{SLOT_TITLES[weak.slot]}" tells the kernel writer '
             f"{SLOT_PURPOSES[weak.slot]}.",
             f'Its variant "{weak.name}" scored a mean reward of {_mean_reward(weak):.2f} over '
             f"{weak.pulls} prompts, the weakest of all:",
             f"<component>\n{weak.text.strip()}\n</component>"]
    if best is not None:
        lines += [f'The best variant of the same part, "{best.name}", scored '
                  f"{_mean_reward(best):.2f} over {best.pulls} prompts:",
                  f"<component>\n{best.text.strip()}\n</component>"]
    lines.append("Rewrite the weak variant so that it leads to more correct and faster "
                 "kernels: concrete, checkable advice, at most 250 words, no code longer than "
                 "one line. Do not copy the best variant; keep what the weak one says that is "
                 "right. Reply with the new text alone between <component> and </component>.")
    return [{"role": "system", "content": REWRITE_ROLE},
            {"role": "user", "content": "\n\n".join(lines)}]


def parse_rewrite(text: str) -> str:
    """The new component text of a rewrite answer."""
    found = _COMPONENT_TAG.findall(text)
    if not found or not found[-1].strip():
        raise ParseError("the rewrite answer has no text between <component> and </component>")
    new_text = found[-1].strip()
    if len(new_text) > MAX_COMPONENT_CHARS:
        raise ParseError(f"the rewritten component has {len(new_text)} characters, over the "
                         f"limit of {MAX_COMPONENT_CHARS}")
    return new_text


def rewrite_name(weak: PromptVariant, call_id: int) -> str:
    """The built-in variant's name and the rewrite's call: unique within the slot."""
    root = weak.name.partition("@")[0]
    return f"{root}@{call_id}"


def _mean_reward(variant: PromptVariant) -> float:
    return variant.reward_sum / variant.pulls if variant.pulls else 0.0


def _faster(latency_ms: float | None, other_ms: float | None) -> bool:
    return latency_ms is not None and other_ms is not None and latency_ms < other_ms
