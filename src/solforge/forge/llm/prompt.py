"""The proposer's prompt: what the model must compute, how fast it could be, what was tried.

The system message is the meta-prompt: a fixed role followed by one variant of each component
slot (philosophy, strategies, pitfalls) that the bandit chose. The user message carries the
problem (inputs and outputs with shapes and dtypes, the PyTorch reference, the exact signature
to return), the speed-of-light analysis of one representative workload, parent kernels from
different archive cells, and the feedback of earlier attempts.

The solution format is fixed to destination-passing style (SOL-ExecBench's default): `run`
receives the inputs and then the pre-allocated outputs, so output allocation is not timed and
the signature can be stated exactly.

The budget is counted in estimated tokens, 4 characters per token: the usual average of BPE
tokenizers on English and code (OpenAI's rule of thumb), close enough to keep a prompt inside
a context window without loading the model's tokenizer. The definition, reference, format and
analysis are always kept; parents are kept best first and attempts newest first while they
fit, each attempt's message cut to its head and tail, its source dropped before the attempt.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from solforge.data.definition import TensorSpec
from solforge.errors import SolforgeError
from solforge.forge.llm.components import SLOT_TITLES, SLOTS
from solforge.forge.llm.parse import ENTRY_FILE, ENTRY_FUNCTION
from solforge.forge.llm.records import LlmAttempt, Parent, parent_rank
from solforge.problem.problem import Problem
from solforge.solar.analysis import Analysis

CHARS_PER_TOKEN = 4
MAX_MESSAGE_CHARS = 1500  # of one attempt's log or error
PARENT_SHARE = 2 / 3  # of the room left after the fixed sections, when there is feedback too
TOP_OPS = 5
PARENTS_HEADER = "## Parent kernels (best first)"
ATTEMPTS_HEADER = "## Earlier attempts (newest first)"

ROLE = """\
You are an expert GPU kernel engineer. You write Triton kernels for NVIDIA Hopper GPUs (H100 and
H200, sm_90) that compute exactly what a PyTorch reference computes, as fast as the hardware
allows. Your kernels are checked on fresh random inputs and timed; the score is how close the
time comes to the speed of light."""


class PromptError(SolforgeError):
    """A prompt that cannot be built within its budget."""


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str
    parents: tuple[str, ...]  # the names of the parents it shows
    attempts: int  # how many earlier attempts it shows

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": self.user}]

    @property
    def digest(self) -> str:
        return prompt_digest(self.messages)

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.system) + estimate_tokens(self.user)


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _cost(piece: str) -> int:
    """A piece of the user message with the blank line that joins it to the next: the costs of
    the pieces add up to no less than the estimate of the whole message."""
    return estimate_tokens(piece + "\n\n")


def prompt_digest(messages: Sequence[Mapping[str, str]]) -> str:
    canonical = json.dumps(list(messages), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def build_prompt(problem: Problem, analysis: Analysis, parents: Sequence[Parent],
                 attempts: Sequence[LlmAttempt], components: Mapping[str, str],
                 token_budget: int) -> Prompt:
    """`attempts` in the order they were made (oldest first); `components`: slot -> text."""
    system = system_message(components)
    fixed = [problem_section(problem, analysis), format_section(problem),
             analysis_section(analysis)]
    task = task_section(bool(parents))
    headers = [h for h, items in ((PARENTS_HEADER, parents), (ATTEMPTS_HEADER, attempts)) if items]
    room = token_budget - estimate_tokens(system) - sum(map(_cost, [*fixed, task, *headers]))
    if room < 0:
        raise PromptError(f"{problem.name}: the definition, reference and analysis alone take "
                          f"{token_budget - room} tokens, over the budget of {token_budget}")
    parent_room = int(room * PARENT_SHARE) if attempts else room
    parent_blocks, kept = _fit_parents(parents, parent_room, room)
    room -= sum(map(_cost, parent_blocks))
    attempt_blocks = _fit_attempts(attempts, room)
    sections = [*fixed]
    if parent_blocks:
        sections.append("\n\n".join([PARENTS_HEADER, *parent_blocks]))
    if attempt_blocks:
        sections.append("\n\n".join([ATTEMPTS_HEADER, *attempt_blocks]))
    sections.append(task)
    return Prompt(system, "\n\n".join(sections), kept, len(attempt_blocks))


def system_message(components: Mapping[str, str]) -> str:
    parts = [ROLE]
    for slot in SLOTS:
        if slot in components:
            parts.append(f"## {SLOT_TITLES[slot]}\n{components[slot].strip()}")
    return "\n\n".join(parts)


def problem_section(problem: Problem, analysis: Analysis) -> str:
    definition = problem.definition
    lines = [f"# Problem: {definition.name} (op type: {definition.op_type})"]
    if definition.description:
        lines.append(definition.description)
    lines.append("\n## Axes")
    for axis in definition.axes.values():
        lines.append(_axis_line(axis.name, axis.kind, axis.value, axis.expression,
                                analysis.axes.get(axis.name)))
    lines.append("\n## Inputs (in call order)")
    lines += [_tensor_line(spec, analysis.axes) for spec in definition.inputs.values()]
    lines.append("\n## Outputs (in call order, after the inputs)")
    lines += [_tensor_line(spec, analysis.axes) for spec in definition.outputs.values()]
    if definition.constraints:
        lines.append("\n## Constraints")
        lines += [f"- {constraint}" for constraint in definition.constraints]
    lines.append(f"\n## Reference (PyTorch)\n```python\n{definition.reference.rstrip()}\n```")
    return "\n".join(lines)


def format_section(problem: Problem) -> str:
    definition = problem.definition
    arguments = ", ".join([*definition.inputs, *definition.outputs])
    return (f"## What to return\n"
            f"One Python file, `{ENTRY_FILE}`, in a single ```python block: imports (torch, "
            f"triton, triton.language as tl), one or more @triton.jit kernels, and the entry "
            f"point\n\n    def {ENTRY_FUNCTION}({arguments}) -> None\n\n"
            f"in destination-passing style: the caller allocates the outputs (contiguous, on "
            f"the GPU, with the shapes and dtypes above) and passes them after the inputs; "
            f"`{ENTRY_FUNCTION}` launches the kernels that write every element of them and "
            f"returns nothing. Tensor inputs are CUDA tensors; scalar inputs are Python "
            f"numbers. Axis sizes are read from the tensors' shapes.")


def analysis_section(analysis: Analysis) -> str:
    axes = ", ".join(f"{name}={value}" for name, value in analysis.axes.items())
    bound = ("memory-bound (DRAM)" if analysis.bound == "memory"
             else f"compute-bound ({analysis.binding_unit})")
    flops = ", ".join(f"{unit} {value:.3g}" for unit, value in analysis.flops.items()) or "none"
    lines = [
        f"## Speed of light (workload {analysis.workload}: {axes}; {analysis.hardware})",
        f"T_SOL = {analysis.t_sol_ms:.4g} ms: {bound}.",
        f"FLOPs by unit: {flops}.",
        f"Bytes a fully fused kernel must move (each input read once, each output written "
        f"once): {analysis.bytes_fused:.4g}; one kernel per op would move "
        f"{analysis.bytes_unfused:.4g}.",
        f"At peak: compute {analysis.t_compute_ms:.4g} ms, memory {analysis.t_memory_ms:.4g} ms.",
    ]
    if analysis.ops:
        lines.append("Largest ops of the reference (calls, FLOPs, bytes, roofline ms):")
        lines += [f"- {op.op}: {op.calls}, {op.flops:.3g}, {op.bytes:.3g}, "
                  f"{op.roofline_ms:.3g}" for op in analysis.ops[:TOP_OPS]]
    return "\n".join(lines)


def task_section(has_parents: bool) -> str:
    goal = ("Write a new kernel that stays correct and is faster than the parents, closer to "
            "T_SOL." if has_parents else "Write a correct kernel that comes as close to T_SOL "
            "as you can.")
    return (f"## Task\n{goal} Say in at most three sentences what you change and why, then "
            f"give the complete `{ENTRY_FILE}` in one ```python block.")


def parent_block(number: int, parent: Parent) -> str:
    measured = [f"S = {parent.sol_score:.3f}" if parent.sol_score is not None else "S unknown"]
    if parent.latency_ms is not None:
        measured.append(f"T_k = {parent.latency_ms:.4g} ms")
    cell = " ".join(f"{k}={v}" for k, v in parent.descriptor.items()) or "unknown"
    lines = [f"### Parent {number}: {parent.name} ({', '.join(measured)}; cell: {cell})"]
    for path, content in parent.sources():
        lines.append(f"```python\n# file: {path}\n{content.rstrip()}\n```")
    return "\n".join(lines)


def attempt_block(attempt: LlmAttempt, with_source: bool) -> str:
    lines = [f"### {attempt.solution}: {attempt.status} "
             f"({attempt.passed}/{attempt.workloads} workloads passed)"]
    if attempt.message:
        lines.append(f"```\n{clip(attempt.message.strip(), MAX_MESSAGE_CHARS)}\n```")
    if attempt.correctness is not None:
        lines.append(_mismatch_line(attempt.correctness))
    if attempt.latency_ms is not None:
        lines.append(_timing_line(attempt))
    if attempt.profile:
        lines.append(attempt.profile)
    if with_source and attempt.source:
        lines.append(f"Its source:\n```python\n{attempt.source.rstrip()}\n```")
    return "\n".join(lines)


def clip(text: str, limit: int) -> str:
    """The head and the tail of a long text (the tail of a traceback says most)."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def _fit_parents(parents: Sequence[Parent], share: int,
                 room: int) -> tuple[list[str], tuple[str, ...]]:
    """The best parents whose blocks fit in `share`; the best one alone may use all `room`."""
    ranked = sorted(parents, key=parent_rank)
    blocks: list[str] = []
    kept: list[str] = []
    used = 0
    for parent in ranked:
        block = parent_block(len(blocks) + 1, parent)
        cost = _cost(block)
        limit = room if not blocks else share
        if used + cost > limit:
            continue
        blocks.append(block)
        kept.append(parent.name)
        used += cost
    return blocks, tuple(kept)


def _fit_attempts(attempts: Sequence[LlmAttempt], room: int) -> list[str]:
    """Newest first, each with its source if that fits, else without; stop at the first
    attempt that does not fit at all."""
    blocks: list[str] = []
    for attempt in reversed(attempts):
        for with_source in (True, False):
            block = attempt_block(attempt, with_source)
            if _cost(block) <= room:
                blocks.append(block)
                room -= _cost(block)
                break
        else:
            break
    return blocks


def _axis_line(name: str, kind: str, value: int | None, expression: str | None,
               resolved: int | None) -> str:
    if kind == "const":
        return f"- {name} = {value} (constant)"
    if kind == "expr":
        return f"- {name} = {expression} ({resolved} in the analysed workload)"
    return f"- {name}: varies between workloads ({resolved} in the analysed workload)"


def _tensor_line(spec: TensorSpec, axes: Mapping[str, int]) -> str:
    dtype = spec.dtype.name
    if spec.shape is None:
        return f"- {spec.name}: a Python scalar ({dtype})"
    symbolic = ", ".join(spec.shape)
    sizes = ", ".join(str(axes[name]) for name in spec.shape if name in axes)
    return f"- {spec.name}: [{symbolic}] {dtype} (here [{sizes}])"


def _mismatch_line(correctness: Mapping[str, object]) -> str:
    matched = correctness.get("matched_ratio")
    share = f", {matched:.2%} of elements within tolerance" if matched is not None else ""
    specials = [word for flag, word in (("has_nan", "NaN"), ("has_inf", "infinity"))
                if correctness.get(flag)]
    special = f", the output holds {' and '.join(specials)}" if specials else ""
    return (f"Worst mismatch: max abs error {correctness['max_absolute_error']:.3g}, "
            f"max rel error {correctness['max_relative_error']:.3g}{share}{special}.")


def _timing_line(attempt: LlmAttempt) -> str:
    parts = [f"T_k = {attempt.latency_ms:.4g} ms"]
    if attempt.baseline_ms is not None:
        parts.append(f"T_b = {attempt.baseline_ms:.4g} ms")
    if attempt.sol_score is not None:
        parts.append(f"S = {attempt.sol_score:.3f}")
    return "Timing (mean over workloads): " + ", ".join(parts) + "."
