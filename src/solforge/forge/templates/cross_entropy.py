"""Cross-entropy over a vocabulary: per-row losses and their mean over labelled rows.

Applies to a problem with [rows, vocab] floating logits and [rows] integer labels in, and
[rows] float32 losses and a 0-D float32 mean out, whose reference the probe matches to
log-softmax cross-entropy with ignore_index -100 (PyTorch's default) and the "mean" reduction.

Knobs: ROWS per program, BLOCK (logits per step of the online log-sum-exp), NUM_WARPS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from solforge.data.definition import Definition
from solforge.data.workload import Workload
from solforge.forge.templates.template import (
    Matcher,
    Params,
    Template,
    largest,
    render_kernel,
    usable_names,
)
from solforge.hardware.block_limits import (
    first_reason,
    idle_threads_reason,
    register_reason,
    threads_reason,
    tile_words,
)
from solforge.problem.probe import (
    FLOAT_DTYPES,
    Inputs,
    Model,
    matching_variant,
    small_axes,
)
from solforge.problem.problem import Problem

IGNORE_INDEX = -100


@dataclass(frozen=True)
class CrossEntropyBinding:
    logits: str
    labels: str
    losses: str
    loss: str
    vocab_axis: str


def _model(logits: str, labels: str) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        log_probs = torch.log_softmax(inputs[logits].to(torch.float32), dim=-1)
        targets = inputs[labels]
        labelled = targets != IGNORE_INDEX
        picked = log_probs.gather(1, torch.where(labelled, targets, 0).unsqueeze(1)).squeeze(1)
        losses = torch.where(labelled, -picked, 0.0)
        return [losses, losses.sum() / labelled.sum()]

    return model


def _match(definition: Definition) -> CrossEntropyBinding | None:
    if len(definition.inputs) != 2 or len(definition.outputs) != 2:
        return None
    (logits, labels), (losses, loss) = definition.inputs.values(), definition.outputs.values()
    if not usable_names(definition) or logits.shape is None or len(logits.shape) != 2:
        return None
    if logits.dtype.name not in FLOAT_DTYPES or labels.dtype.kind != "int":
        return None
    if labels.shape != logits.shape[:1] or losses.shape != labels.shape or loss.shape != ():
        return None
    if losses.dtype.name != "float32" or loss.dtype.name != "float32":
        return None
    variants = {IGNORE_INDEX: _model(logits.name, labels.name)}
    if matching_variant(definition, small_axes(definition), {}, variants) is None:
        return None
    return CrossEntropyBinding(logits.name, labels.name, losses.name, loss.name,
                               logits.shape[1])


bind = Matcher(_match)


def valid(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding(TEMPLATE.name, problem)
    rows, block, warps = params["ROWS"], params["BLOCK"], params["NUM_WARPS"]
    vocab = largest(problem, binding.vocab_axis)
    return first_reason(
        threads_reason(warps),
        idle_threads_reason(rows * block, warps, "ROWS * BLOCK"),
        None if block < 2 * vocab else f"BLOCK={block} is wider than the {vocab}-entry vocabulary",
        register_reason(2 * tile_words(rows, block, warps), warps, "the logits and exponentials"),
    )


def render(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind.binding(TEMPLATE.name, problem)
    arguments = {"logits": binding.logits, "labels": binding.labels, "losses": binding.losses,
                 "loss": binding.loss}
    summary = ("Cross-entropy with an online log-sum-exp per row (ignore_index -100), then the "
               "mean over labelled rows; float32 arithmetic.")
    return render_kernel(problem.definition, TEMPLATE.name, params, "cross_entropy.py",
                         {"IGNORE_INDEX": IGNORE_INDEX}, "cross_entropy", arguments, summary)


TEMPLATE = Template(
    name="cross_entropy",
    family="row_reduction",
    space={"ROWS": (1, 2, 4, 8, 16), "BLOCK": (1024, 2048, 4096, 8192, 16384),
           "NUM_WARPS": (4, 8, 16)},
    applies=bind.applies,
    valid=valid,
    render=render,
)
