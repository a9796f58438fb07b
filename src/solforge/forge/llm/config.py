"""The LLM proposer's settings: which endpoint, how to call it, how to build and evolve prompts.

Any OpenAI-compatible chat-completions endpoint works: a hosted API, or a local vLLM, SGLang or
Ollama server (`base_url` ending in /v1). The API key is read from the environment, never from a
file or the command line, so it stays out of shell histories and the results store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from solforge.errors import SolforgeError

API_KEY_VARIABLES = ("SOLFORGE_LLM_API_KEY", "OPENAI_API_KEY")
NO_KEY = "none"  # what local servers that check no key are sent


class LLMConfigError(SolforgeError):
    """An LLM setting that cannot work."""


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    temperature: float = 0.8
    max_tokens: int = 8192  # per completion
    timeout_s: float = 300.0  # per request; an 8k-token answer from a slow server takes minutes
    max_attempts: int = 6  # requests per call, the first included
    backoff_s: float = 2.0  # the wait after the first failure; doubles after each one
    max_backoff_s: float = 120.0  # no wait is longer, a server's Retry-After included
    samples: int = 1  # proposals per propose(): one request each, each with its own components
    token_budget: int = 12_000  # the prompt's estimated size, system message included
    rewrite_every: int = 20  # proposals with an outcome between two rewrites; 0: never
    min_pulls_to_rewrite: int = 5  # a variant is judged only after this many outcomes
    seed: int | None = None  # the bandit's random draws; None: fresh ones

    def __post_init__(self) -> None:
        if not self.base_url or not self.model:
            raise LLMConfigError("the LLM proposer needs a base URL and a model name")
        for name in ("max_attempts", "samples", "token_budget"):
            if getattr(self, name) < 1:
                raise LLMConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.rewrite_every < 0:
            raise LLMConfigError(f"rewrite_every must be 0 (never) or more, "
                                 f"got {self.rewrite_every}")


def api_key() -> str:
    """The first of SOLFORGE_LLM_API_KEY and OPENAI_API_KEY that is set, else "none"."""
    for variable in API_KEY_VARIABLES:
        value = os.environ.get(variable)
        if value:
            return value
    return NO_KEY
