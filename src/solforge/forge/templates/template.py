"""The template record, and the helpers every template renders its solutions with.

A template is a parameterised Triton kernel for one op family. It knows which problems it can
solve (`applies`: the definition's structure, then a probe of its reference,
problem/probe.py), the knobs of its kernel (`space`: name -> choices), which settings cannot
work (`valid`: the reason, found before anything compiles: shared memory, registers, a tile that
must divide an axis, a row too long for one block) and how to write a candidate (`render`: a
FlashInfer-Bench solution JSON).

Rendered candidates are standalone and honest: the kernel sources live in kernels/ as plain
Python modules; `render` copies one, rewrites its constant assignments to the chosen values
(`set_constants`), and appends `run`, the entry point in the definition's argument order
(inputs, then the pre-allocated outputs: destination passing style).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import keyword
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generic, TypeVar

import triton

from solforge.data.definition import Definition
from solforge.data.workload import Workload
from solforge.errors import SolforgeError
from solforge.problem.problem import Problem

ParamValue = int | str
Params = Mapping[str, ParamValue]
Space = Mapping[str, tuple[ParamValue, ...]]

KERNELS_PACKAGE = "solforge.forge.templates.kernels"
AUTHOR = "solforge-templates"
TARGET_HARDWARE = ("H200",)


@dataclass(frozen=True)
class Template:
    name: str
    family: str
    space: Space
    applies: Callable[[Definition], bool]
    valid: Callable[[Params, Problem, Workload], str | None]
    render: Callable[[Params, Problem], dict[str, Any]]
    # Settings known to suit the target, tried first (where valid) and in this order: a
    # search's first few trials otherwise go to the sampler's random start.
    seeds: tuple[Params, ...] = ()

    def configurations(self) -> Iterator[dict[str, ParamValue]]:
        """Every point of the parameter space, in a fixed order."""
        names = list(self.space)
        for values in itertools.product(*(self.space[name] for name in names)):
            yield dict(zip(names, values))

    def invalid_reason(self, params: Params, problem: Problem) -> str | None:
        """Why `params` cannot work on some workload of the problem, or None."""
        for workload in problem.workloads:
            reason = self.valid(params, problem, workload)
            if reason is not None:
                return f"workload {workload.uuid}: {reason}"
        return None


Binding = TypeVar("Binding")


class TemplateError(SolforgeError):
    """A template asked to check or render a problem it does not apply to."""


class Matcher(Generic[Binding]):
    """How a template recognises its problems: `match(definition)` (which may run the
    reference) cached per definition, with the two questions every template asks of it."""

    def __init__(self, match: Callable[[Definition], Binding | None]) -> None:
        self.match = match
        self.found: dict[str, Binding | None] = {}

    def __call__(self, definition: Definition) -> Binding | None:
        key = definition_fingerprint(definition)
        if key not in self.found:
            self.found[key] = self.match(definition)
        return self.found[key]

    def applies(self, definition: Definition) -> bool:
        return self(definition) is not None

    def binding(self, template: str, problem: Problem) -> Binding:
        """What `match` found in the problem's definition; TemplateError if nothing."""
        binding = self(problem.definition)
        if binding is None:
            raise TemplateError(f"template {template} does not apply to problem {problem.name}")
        return binding


def definition_fingerprint(definition: Definition) -> str:
    text = json.dumps(definition.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def usable_names(definition: Definition) -> bool:
    """Input and output names become `run`'s parameters: they must be Python identifiers."""
    names = [*definition.inputs, *definition.outputs]
    return all(name.isidentifier() and not keyword.iskeyword(name) for name in names)


def kernel_source(file: str) -> str:
    return resources.files(KERNELS_PACKAGE).joinpath(file).read_text()


def set_constants(source: str, constants: Mapping[str, ParamValue | float | bool]) -> str:
    """The source with each `NAME = value` line at the top level rewritten to the given value.

    Each name must be assigned exactly once at the start of a line, so a rendered kernel holds
    its parameters as plain constants (what a reader, a compiler and a diff all see).
    """
    lines = source.splitlines(keepends=True)
    for name, value in constants.items():
        prefix = f"{name} = "
        hits = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        if len(hits) != 1:
            raise ValueError(f"kernel source assigns {name} {len(hits)} times, expected once")
        comment = lines[hits[0]].partition("  #")[2]
        suffix = f"  #{comment}" if comment else "\n"
        lines[hits[0]] = f"{prefix}{_literal(value)}{suffix}"
    return "".join(lines)


def _literal(value: ParamValue | float | bool) -> str:
    """Python source for a constant; strings in double quotes, as the rest of the code."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def entry_point(definition: Definition, launcher: str, arguments: Mapping[str, str]) -> str:
    """`run`, taking the definition's inputs then outputs and calling `launcher` by role.

    `arguments` maps the launcher's keyword parameters to definition input/output names.
    """
    parameters = ", ".join([*definition.inputs, *definition.outputs])
    call = ", ".join(f"{role}={name}" for role, name in arguments.items())
    return (
        "\n\n"
        f"{_wrapped(f'def run({parameters}):', len('def run('))}\n"
        '    """The entry point: the inputs in definition order, then the outputs to fill."""\n'
        f"{_wrapped(f'    {launcher}({call})', len(f'    {launcher}('))}\n"
    )


def _wrapped(line: str, indent: int) -> str:
    """A call or signature broken at its commas to fit 100 columns, continuation lines aligned
    with the opening parenthesis."""
    return textwrap.fill(line, width=100, subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False)


def render_kernel(definition: Definition, template: str, params: Params, file: str,
                  constants: Mapping[str, ParamValue | float | bool], launcher: str,
                  arguments: Mapping[str, str], summary: str) -> dict[str, Any]:
    """The solution for one setting: the kernel file with `params` and the problem's
    `constants` written in, then `run`. `summary` says what the kernel computes."""
    source = set_constants(kernel_source(file), {**params, **constants})
    source += entry_point(definition, launcher, arguments)
    description = f"{summary} Template {template}: {describe_params(params)}."
    return solution_dict(definition, template, params, source, description)


def solution_name(definition: Definition, template: str, params: Params) -> str:
    settings = "-".join(f"{name.lower()}{value}" for name, value in params.items())
    return f"{definition.name}-{template}-{settings}"


def solution_dict(definition: Definition, template: str, params: Params, source: str,
                  description: str) -> dict[str, Any]:
    """A FlashInfer-Bench solution JSON with one Triton source, kernel.py::run."""
    return {
        "name": solution_name(definition, template, params),
        "definition": definition.name,
        "author": AUTHOR,
        "description": description,
        "spec": {
            "languages": ["triton"],
            "target_hardware": list(TARGET_HARDWARE),
            "entry_point": "kernel.py::run",
            "dependencies": ["torch", "triton >= 3.4"],
            "destination_passing_style": True,
        },
        "sources": [{"path": "kernel.py", "content": source}],
    }


def describe_params(params: Params) -> str:
    return ", ".join(f"{name}={value}" for name, value in params.items())


def row_block_reason(block: int, row: int, widest: int, single_pass: bool) -> str | None:
    """Row kernels: a single pass needs the whole row in one block (checked against this
    workload's row); a block wider than the widest row, or a two-pass sweep over rows that all
    fit one block, is waste (checked against the widest row of any workload)."""
    if single_pass and block < row:
        return f"single_pass holds a row in one block: BLOCK={block} < {row} columns"
    if single_pass and block > triton.next_power_of_2(widest):
        return f"BLOCK={block} is wider than the widest row ({widest} columns) needs"
    if not single_pass and block >= widest:
        return (f"every row (at most {widest} columns) fits BLOCK={block}: two_pass would "
                "re-read them for nothing")
    return None


def largest(problem: Problem, axis: str) -> int:
    """The axis's largest value over the problem's workloads.

    Screens against waste (a block wider than any row) compare with this, not with the
    workload at hand: a setting is valid for a problem only if it is valid for all of its
    workloads, and a var axis that is small in one workload must not rule out the others' best.
    """
    return max(problem.axes(workload)[axis] for workload in problem.workloads)
