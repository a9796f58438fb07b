"""One chat completion from an OpenAI-compatible endpoint, with retries and token accounting.

The official `openai` client does the HTTP; its own retries are switched off (max_retries=0) so
that every attempt, every wait and its reason are ours to record. A request is retried when
the failure is the server's or the network's: HTTP 429 (rate limit), 408, 409 and 5xx, a
timeout, a refused connection. The wait is the server's Retry-After when it sends one, else
`backoff_s * 2**(k-1)` after the k-th failure, never more than `max_backoff_s`. Other failures
(400 bad request, 401 bad key, 404 unknown model) are not retried: asking again changes nothing.
A call never raises for an endpoint's failure; it returns a Completion whose `error` says why.
"""

from __future__ import annotations

import datetime
import email.utils
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solforge.forge.llm.config import LLMConfig, LLMConfigError, api_key

RETRIED_STATUS = (408, 409, 429)  # and every status >= 500

Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Retry:
    attempt: int  # the failed request, counted from 1
    reason: str
    wait_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "reason": self.reason, "wait_s": self.wait_s}


@dataclass(frozen=True)
class Completion:
    text: str | None  # None when every attempt failed
    prompt_tokens: int | None  # the endpoint's own count (its usage field), None if not sent
    completion_tokens: int | None
    latency_s: float | None  # the answered request alone, retries and waits excluded
    attempts: int
    retries: tuple[Retry, ...]
    error: str | None = None
    finish_reason: str | None = None  # "length" means the answer was cut at max_tokens

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class _Failure:
    reason: str
    retry: bool
    retry_after_s: float | None


class ChatClient:
    """Chat completions from one endpoint and model."""

    def __init__(self, config: LLMConfig, sleep: Sleep = time.sleep) -> None:
        try:
            from openai import OpenAI
        except ImportError:
            raise LLMConfigError("the LLM proposer needs the openai package: "
                                 "pip install 'solforge[llm]'") from None
        self.config = config
        self._sleep = sleep
        self._openai = OpenAI(api_key=api_key(), base_url=config.base_url,
                              timeout=config.timeout_s, max_retries=0)

    def complete(self, messages: Sequence[Mapping[str, str]]) -> Completion:
        import openai

        retries: list[Retry] = []
        attempt = 0
        while True:
            attempt += 1
            began = time.perf_counter()
            try:
                response = self._request(messages)
            except openai.OpenAIError as exc:
                failure = _classify(exc)
                if not failure.retry or attempt >= self.config.max_attempts:
                    return Completion(None, None, None, None, attempt, tuple(retries),
                                      error=failure.reason)
                wait = backoff_s(attempt, failure.retry_after_s, self.config)
                retries.append(Retry(attempt, failure.reason, wait))
                self._sleep(wait)
                continue
            return _completion(response, time.perf_counter() - began, attempt, retries)

    def _request(self, messages: Sequence[Mapping[str, str]]) -> Any:
        return self._openai.chat.completions.create(
            model=self.config.model, messages=[dict(m) for m in messages],
            temperature=self.config.temperature, max_tokens=self.config.max_tokens)


def backoff_s(attempt: int, retry_after_s: float | None, config: LLMConfig) -> float:
    """The wait after the `attempt`-th failed request."""
    if retry_after_s is not None:
        return min(max(retry_after_s, 0.0), config.max_backoff_s)
    return min(config.backoff_s * 2 ** (attempt - 1), config.max_backoff_s)


def parse_retry_after(value: str | None, now: datetime.datetime | None = None) -> float | None:
    """Seconds from a Retry-After header: a number of seconds, or an HTTP date (RFC 9110)."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return (when - now).total_seconds()


def _classify(exc: Exception) -> _Failure:
    """Whether a failure is worth another request, and how long the server asks us to wait."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry = status in RETRIED_STATUS or status >= 500
        retry_after = parse_retry_after(exc.response.headers.get("retry-after"))
        return _Failure(f"HTTP {status}: {_short(exc.message)}", retry, retry_after)
    if isinstance(exc, openai.APITimeoutError):
        return _Failure("timed out", True, None)
    if isinstance(exc, openai.APIConnectionError):
        return _Failure(f"connection failed: {_short(str(exc))}", True, None)
    return _Failure(f"{type(exc).__name__}: {_short(str(exc))}", False, None)


def _completion(response: Any, latency_s: float, attempts: int,
                retries: list[Retry]) -> Completion:
    usage = getattr(response, "usage", None)
    choices = getattr(response, "choices", None) or []
    if not choices:
        return Completion(None, None, None, latency_s, attempts, tuple(retries),
                          error="the response has no choices")
    choice = choices[0]
    return Completion(
        text=choice.message.content or "",
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
        latency_s=latency_s, attempts=attempts, retries=tuple(retries),
        finish_reason=choice.finish_reason)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
