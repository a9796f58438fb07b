"""Per-shape composition: one solution that sends each workload shape to the candidate that was
fastest on it.

No single template setting suits every workload of a problem: on a GEMM a split-K setting wins
the decode shapes (a few rows) and loses the prefill ones several times over to a tiled
setting, and the archive's mean-S fitness keeps one compromise. A composite keeps both: from the
candidates already judged (their per-workload T_k in the store), each workload shape goes to
its fastest PASSED candidate, and any shape not among the workloads to the candidate with the
best overall fitness, so the composite is correct for every shape, not only the workloads.

Only candidates with a PASSED result on every workload are eligible, so each part is known to
be correct on every workload (the composite is judged again anyway). Parts are Python
candidates: the destination-passing ones the templates render, and the problem's reference
returning its outputs (reference_part.py, where the optimizer judged it); composites are never
parts. A composite with a returning part returns its outputs too: it allocates them (with
`torch.empty`, no device work) for the destination-passing parts and hands the reference's back
untouched. Wrapping the reference to write into pre-allocated outputs instead would add a copy
and, on a small shape, the host's time between the reference's last launch and the copy's: on
the H200 that wrapped reference measured a median 48 us slower than eager on the workloads
eager runs in under 100 us, so it lost shapes the reference itself wins.

The shape key is the tuple of the definition's variable axes, read off the call's arguments
(`args[i].shape[d]` for the first tensor that carries each axis): the const and expression axes
follow from them, so they fix every tensor's shape. Workloads that share a key (they differ in
data or scalars only) go, together, to the candidate fastest over all of them. The dispatcher
imports every part when it is imported, and each call costs one dict lookup and one call.

The rendered JSON depends on the winners only (no timings in it), so composing the same
winners again gives the same solution, and the store's dedup by source hash reuses it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from solforge.data.definition import Definition
from solforge.data.solution import Solution, SolutionError, parse_solution
from solforge.data.workload import Workload
from solforge.forge.archive import Judged
from solforge.problem.problem import Problem

PROPOSER = "compose"
ENTRY_FILE = "composite.py"
PART_PREFIX = "part_"

ShapeKey = tuple[int, ...]


@dataclass(frozen=True)
class Composition:
    """The composite (None when there is nothing to compose, and `reason` says why), which
    candidate each workload went to, and the fallback for every other shape."""

    solution: dict[str, Any] | None
    assignment: dict[str, Judged]  # workload uuid -> its winner
    fallback: Judged | None
    reason: str | None = None

    @property
    def parts(self) -> list[Judged]:
        """The winners and the fallback, each once, in the order they first appear."""
        found = {j.candidate_id: j for j in [*self.assignment.values(), self.fallback] if j}
        return list(found.values())

    def summary(self) -> str:
        """One line: which candidate each workload went to."""
        return "; ".join(f"{uuid} -> {judged.name}" for uuid, judged in self.assignment.items())


def compose(problem: Problem, candidates: Sequence[Judged],
            workloads: Sequence[Workload] | None = None) -> Composition:
    """Compose `candidates` (archive.passed) over `workloads` (default: all the problem's)."""
    workloads = list(workloads if workloads is not None else problem.workloads)
    uuids = [w.uuid for w in workloads]
    allocatable = output_allocation(problem.definition) is not None
    eligible = [c for c in candidates if c.proposer != PROPOSER and _composable(c, allocatable)
                and all(uuid in c.latencies for uuid in uuids)]
    if not eligible:
        return Composition(None, {}, None, "no candidate has a PASSED result on every "
                           f"workload ({len(uuids)}) of {problem.name}")
    assignment = pick_winners(eligible, shape_groups(problem, workloads))
    fallback = max(eligible, key=lambda c: (c.fitness, -c.candidate_id))
    composition = Composition(None, assignment, fallback)
    if len({j.candidate_id for j in assignment.values()}) < 2:
        return Composition(None, assignment, fallback,
                           "one candidate is the fastest on every workload shape")
    table = {shape_key(problem, w): assignment[w.uuid] for w in workloads}
    return Composition(render(problem.definition, table, fallback, composition.parts),
                       assignment, fallback)


def pick_winners(candidates: Sequence[Judged],
                 groups: dict[ShapeKey, list[str]]) -> dict[str, Judged]:
    """Each workload's winner: the candidate with the least T_k summed over the workloads of
    its shape group (the least T_k on it, for a group of one); ties go to the older one."""
    assignment: dict[str, Judged] = {}
    for uuids in groups.values():
        winner = min(candidates, key=lambda c: (sum(c.latencies[u] for u in uuids),
                                                c.candidate_id))
        assignment.update({uuid: winner for uuid in uuids})
    return assignment


def shape_groups(problem: Problem, workloads: Sequence[Workload]) -> dict[ShapeKey, list[str]]:
    """Workload uuids by shape key, in workload order."""
    groups: dict[ShapeKey, list[str]] = {}
    for workload in workloads:
        groups.setdefault(shape_key(problem, workload), []).append(workload.uuid)
    return groups


def shape_key(problem: Problem, workload: Workload) -> ShapeKey:
    """The workload's variable axes, in the order `key_positions` reads them off a call."""
    axes = problem.axes(workload)
    return tuple(axes[axis] for axis, _, _ in key_positions(problem.definition))


def key_positions(definition: Definition) -> list[tuple[str, int, int]]:
    """(axis, argument index, dimension) for each variable axis: the first tensor argument
    (inputs, then outputs, the call's order) whose shape names it. An axis no tensor names
    cannot be read off a call and is left out of the key."""
    specs = [*definition.inputs.values(), *definition.outputs.values()]
    positions = []
    for axis in definition.var_axes:
        found = next(((index, spec.shape.index(axis)) for index, spec in enumerate(specs)
                      if spec.shape is not None and axis in spec.shape), None)
        if found is not None:
            positions.append((axis, *found))
    return positions


def output_allocation(definition: Definition) -> list[tuple[tuple[str, ...], str]] | None:
    """How a returning composite allocates each output for a destination-passing part: its
    dimensions as Python expressions (`args[i].shape[d]`, or a const axis's value) and its
    torch dtype. None when some output cannot be allocated from the inputs alone: a Python
    scalar, a packed dtype, an expression axis, or a variable axis no input carries."""
    if all(spec.shape is None for spec in definition.inputs.values()):
        return None  # no input tensor to take the device from
    readable = {axis: f"args[{index}].shape[{dim}]" for axis, index, dim in
                key_positions(definition) if index < len(definition.inputs)}
    allocation = []
    for spec in definition.outputs.values():
        if spec.shape is None or spec.dtype.elements_per_storage != 1:
            return None
        dims = []
        for name in spec.shape:
            axis = definition.axes[name]
            if axis.kind == "const":
                dims.append(str(axis.value))
            elif axis.kind == "var" and name in readable:
                dims.append(readable[name])
            else:
                return None
        allocation.append((tuple(dims), str(spec.dtype.torch_dtype)))
    return allocation


def _composable(candidate: Judged, allocatable: bool) -> bool:
    """A Python solution the dispatcher can import and call: destination-passing, or returning
    its outputs where the composite can allocate them for its destination-passing parts."""
    try:
        solution = parse_solution(candidate.solution)
    except SolutionError:
        return False
    return not solution.is_cpp and (solution.destination_passing_style or allocatable)


def _returns(judged: Judged) -> bool:
    """Whether this part returns its outputs (the reference) instead of writing them."""
    return not parse_solution(judged.solution).destination_passing_style


# ---- rendering ------------------------------------------------------------------------------


def part_name(judged: Judged) -> str:
    """A package name that no other part and no library can have: the hash of its sources."""
    digest = hashlib.sha256(json.dumps(judged.solution, sort_keys=True).encode()).hexdigest()
    return f"{PART_PREFIX}{digest[:12]}"


def render(definition: Definition, table: dict[ShapeKey, Judged], fallback: Judged,
           parts: Sequence[Judged]) -> dict[str, Any]:
    """The composite's solution JSON: each part's sources under its own package, and the
    dispatcher `composite.py::run`."""
    ordered = sorted(parts, key=part_name)
    solutions = [parse_solution(part.solution) for part in ordered]
    sources: list[dict[str, str]] = []
    for part, solution in zip(ordered, solutions):
        package = part_name(part)
        sources.append({"path": f"{package}/__init__.py", "content": ""})
        sources += [{"path": f"{package}/{s.path}", "content": s.content}
                    for s in solution.sources]
    returning = any(_returns(part) for part in ordered)
    dispatcher = dispatcher_source(definition, table, fallback, ordered, returning)
    digest = hashlib.sha256(dispatcher.encode()).hexdigest()[:10]
    sources.insert(0, {"path": ENTRY_FILE, "content": dispatcher})
    return {
        "name": f"{definition.name}-composite-{digest}",
        "definition": definition.name,
        "author": "solforge-compose",
        "description": (f"Per-shape dispatch over {len(ordered)} judged candidates: "
                        f"{', '.join(part.name for part in ordered)}; other shapes go to "
                        f"{fallback.name}."),
        "spec": _spec(solutions, returning),
        "sources": sources,
    }


def _spec(solutions: Sequence[Solution], returning: bool) -> dict[str, Any]:
    """The parts' languages, target hardware and dependencies together; the dispatcher's
    entry point, destination-passing unless a part returns its outputs."""
    spec: dict[str, Any] = {"languages": _union(s.languages for s in solutions)}
    hardware = _union(s.spec_extra.get("target_hardware", []) for s in solutions)
    if hardware:
        spec["target_hardware"] = hardware
    spec["entry_point"] = f"{ENTRY_FILE}::run"
    dependencies = _union(s.dependencies for s in solutions)
    if dependencies:
        spec["dependencies"] = dependencies
    spec["destination_passing_style"] = not returning
    return spec


def dispatcher_source(definition: Definition, table: dict[ShapeKey, Judged], fallback: Judged,
                      parts: Sequence[Judged], returning: bool = False) -> str:
    """`run(*args)`: the call's shape key, one dict lookup, one call of that part's entry.
    When `returning`, a destination-passing part is called through a wrapper that allocates
    its outputs and returns them."""
    names = {part.candidate_id: f"_{part_name(part)}" for part in parts}
    imports = ["import torch"] if returning else []
    wrappers = ""
    for part in parts:
        solution = parse_solution(part.solution)
        module = solution.entry_file.removesuffix(".py").replace("/", ".")
        name = names[part.candidate_id]
        imports.append(f"from {part_name(part)}.{module} import {solution.entry_function} "
                       f"as {name}{'_into' if returning and not _returns(part) else ''}")
        if returning and not _returns(part):
            wrappers += (f"\n\ndef {name}(*args):\n    outputs = _outputs(args)\n"
                         f"    {name}_into(*args, *outputs)\n    return outputs\n")
    positions = key_positions(definition)
    axes = ", ".join(axis for axis, _, _ in positions)
    reads = [f"args[{index}].shape[{dim}]" for _, index, dim in positions]
    key = ", ".join(reads) + ("," if len(reads) == 1 else "")
    rows = "".join(f"    {key_value!r}: {names[judged.candidate_id]},  # {judged.name}\n"
                   for key_value, judged in sorted(table.items()))
    return (
        f'"""Per-shape dispatch for {definition.name}: the call\'s ({axes}) picks the '
        'candidate that was\nfastest on that workload shape; any other shape goes to the one '
        'with the best overall fitness."""\n\n'
        + "\n".join(imports) + "\n"
        + (_allocator_source(definition) + wrappers + "\n" if returning else "") + "\n"
        f"_FALLBACK = {names[fallback.candidate_id]}  # {fallback.name}\n"
        f"_BY_SHAPE = {{\n{rows}}}\n\n\n"
        "def run(*args):\n"
        f"    return _BY_SHAPE.get(({key}), _FALLBACK)(*args)\n"
    )


def _allocator_source(definition: Definition) -> str:
    """`_outputs(args)`: empty outputs for a destination-passing part of a returning composite,
    on the device of the first tensor input."""
    allocation = output_allocation(definition)
    assert allocation is not None  # a returning part is composable only then
    first = next(index for index, spec in enumerate(definition.inputs.values())
                 if spec.shape is not None)
    tensors = "".join(f"        torch.empty(({', '.join(dims)}{',' if len(dims) == 1 else ''}), "
                      f"dtype={dtype}, device=device),\n" for dims, dtype in allocation)
    return (f"\n\ndef _outputs(args):\n    device = args[{first}].device\n"
            f"    return [\n{tensors}    ]\n")


def _union(groups: Iterable[Iterable[str]]) -> list[str]:
    """Values of several lists, each once, in first-seen order."""
    return list(dict.fromkeys(value for group in groups for value in group))
