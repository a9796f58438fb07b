"""The LLM proposer: kernels written by a model behind any OpenAI-compatible endpoint.

config.py (endpoint and settings), client.py (requests, retries, token accounting), prompt.py
(problem, speed of light, parents, feedback), parse.py (answer -> solution JSON), components.py
and metaprompt.py (evolving prompt components chosen by a bandit), records.py (parents,
attempts, proposals), proposer.py (the API the optimize loop calls). The `openai` package is
imported only when a client is made (`pip install solforge[llm]`).
"""

from solforge.forge.llm.config import LLMConfig, LLMConfigError
from solforge.forge.llm.parse import ParseError, solution_from_answer
from solforge.forge.llm.proposer import LLMError, LLMProposer
from solforge.forge.llm.records import (
    PARSE_ERROR,
    LlmAttempt,
    Parent,
    Proposal,
    attempt_from_proposal,
    attempt_from_traces,
)

__all__ = [
    "PARSE_ERROR",
    "LLMConfig",
    "LLMConfigError",
    "LLMError",
    "LLMProposer",
    "LlmAttempt",
    "Parent",
    "ParseError",
    "Proposal",
    "attempt_from_proposal",
    "attempt_from_traces",
    "solution_from_answer",
]
