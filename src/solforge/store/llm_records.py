"""The LLM proposer's rows in the results store: its calls and its prompt components.

Kept apart from store.py so the forge's bookkeeping does not grow the bench's module. Every
function commits on return, like the Store's own methods, so many workers share one store: a
component's statistics change by one SQL UPDATE (`pulls = pulls + 1`), never by a read followed
by a write, so two workers rewarding the same component at once lose neither update.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from solforge.store.schema import LLMCall, PromptComponent
from solforge.store.store import Store

PROPOSE = "propose"
REWRITE = "rewrite"


@dataclass(frozen=True)
class CallRecord:
    """What one request to a model cost and returned, ready to be stored as an LLMCall row."""

    purpose: str  # PROPOSE or REWRITE
    problem: str | None
    model: str
    base_url: str
    prompt_hash: str
    prompt: list[dict[str, str]]
    components: tuple[int, ...]
    status: str  # "ok" or "failed"
    error: str | None
    attempts: int
    retries: list[dict[str, Any]]
    latency_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    response: str | None


def save_call(store: Store, record: CallRecord) -> int:
    with store.session() as s:
        row = LLMCall(purpose=record.purpose, problem=record.problem, model=record.model,
                      base_url=record.base_url, prompt_hash=record.prompt_hash,
                      prompt=record.prompt, components=list(record.components),
                      status=record.status, error=record.error, attempts=record.attempts,
                      retries=record.retries, latency_s=record.latency_s,
                      prompt_tokens=record.prompt_tokens,
                      completion_tokens=record.completion_tokens, response=record.response)
        s.add(row)
        s.flush()
        return row.id


def set_call_result(store: Store, call_id: int, solution_name: str | None,
                    parse_error: str | None) -> None:
    """What the response became: a solution, or the reason it gave none."""
    with store.session() as s:
        s.execute(update(LLMCall).where(LLMCall.id == call_id)
                  .values(solution_name=solution_name, parse_error=parse_error))


def set_call_reward(store: Store, call_id: int, reward: float) -> None:
    with store.session() as s:
        s.execute(update(LLMCall).where(LLMCall.id == call_id).values(reward=reward))


def llm_calls(store: Store, purpose: str | None = None) -> list[LLMCall]:
    """The stored calls, oldest first, optionally of one purpose."""
    query = select(LLMCall).order_by(LLMCall.id)
    if purpose is not None:
        query = query.where(LLMCall.purpose == purpose)
    with store.session() as s:
        return list(s.scalars(query))


def rewarded_proposals(store: Store) -> int:
    """How many proposals have an outcome: the clock that schedules component rewrites."""
    with store.session() as s:
        return s.scalar(select(func.count(LLMCall.id)).where(
            LLMCall.purpose == PROPOSE, LLMCall.reward.is_not(None)))


# ---- prompt components -----------------------------------------------------------------------

def seed_components(store: Store, variants: Iterable[tuple[str, str, str]]) -> None:
    """Insert each (slot, name, text) not stored yet; a variant another worker inserted first
    is left as it is (the (slot, name) pair is unique)."""
    for slot, name, text in variants:
        with store.session() as s:
            known = s.scalar(select(PromptComponent.id).where(PromptComponent.slot == slot,
                                                              PromptComponent.name == name))
        if known is not None:
            continue
        try:
            with store.session() as s:
                s.add(PromptComponent(slot=slot, name=name, text=text))
        except IntegrityError:
            continue


def active_components(store: Store) -> list[PromptComponent]:
    with store.session() as s:
        return list(s.scalars(select(PromptComponent).where(PromptComponent.active)
                              .order_by(PromptComponent.id)))


def components(store: Store) -> list[PromptComponent]:
    """Every variant ever stored, retired ones included, oldest first."""
    with store.session() as s:
        return list(s.scalars(select(PromptComponent).order_by(PromptComponent.id)))


def reward_components(store: Store, component_ids: Iterable[int], reward: float) -> None:
    """One more pull of each component, with this reward (in [0, 1])."""
    ids = list(component_ids)
    with store.session() as s:
        s.execute(update(PromptComponent).where(PromptComponent.id.in_(ids)).values(
            pulls=PromptComponent.pulls + 1,
            reward_sum=PromptComponent.reward_sum + reward))


def replace_component(store: Store, old_id: int, name: str, text: str) -> int | None:
    """A rewrite: retire the old variant and add the new one to its slot, with the old one as
    its parent, in one transaction. None when the old one was already retired (another worker
    rewrote it first): the retiring UPDATE matches only an active row."""
    with store.session() as s:
        retired = s.execute(update(PromptComponent).where(
            PromptComponent.id == old_id, PromptComponent.active).values(active=False))
        if retired.rowcount != 1:
            return None
        old = s.get(PromptComponent, old_id)
        new = PromptComponent(slot=old.slot, name=name, text=text, parent_id=old.id,
                              generation=old.generation + 1)
        s.add(new)
        s.flush()
        return new.id
