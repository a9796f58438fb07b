"""The problem's own reference as a candidate part: what a per-shape composite (compose.py) sends
a workload shape to when no kernel the search found beats PyTorch there.

A template's kernel can lose to the library the reference calls on some shapes and win on
others: a Triton GEMM against cuBLAS on a decode batch of one row, say. A composite that may
only choose among the search's kernels then keeps a loss on those shapes, where the reference
itself would do. So before composing, the optimizer judges this candidate once per problem,
like any other: the reference's `run` as it is, returning its outputs, so that on the shapes
it wins the composite costs what eager PyTorch costs (a composite with this part returns its
outputs, compose.py says why). Its per-workload times are measured, never assumed, and it is
chosen only for the shapes where it measured fastest. It has no Triton kernel, so it never
gets a descriptor or a cell: it is a part, never an elite of its own.
"""

from __future__ import annotations

from typing import Any

from solforge.data.definition import Definition
from solforge.forge.compose import output_allocation

PROPOSER = "reference"
ENTRY_FILE = "reference.py"


def part_name(definition_name: str) -> str:
    """The reference part's solution name for a definition."""
    return f"{definition_name}-reference"


def reference_candidate(definition: Definition) -> dict[str, Any] | None:
    """The reference as a solution JSON that returns its outputs; None when a composite could
    not allocate the outputs of its destination-passing parts (compose.output_allocation),
    since then this part could not join them."""
    if output_allocation(definition) is None:
        return None
    return {
        "name": part_name(definition.name),
        "definition": definition.name,
        "author": "solforge-compose",
        "description": ("The definition's reference (PyTorch eager), returning its outputs: a "
                        "composite's part for the shapes no searched kernel beats it on."),
        "spec": {"languages": ["pytorch"], "target_hardware": [],
                 "entry_point": f"{ENTRY_FILE}::run", "destination_passing_style": False},
        "sources": [{"path": ENTRY_FILE, "content": definition.reference}],
    }
