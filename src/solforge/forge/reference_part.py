"""The problem's own reference as a candidate part: what a per-shape composite (compose.py) sends
a workload shape to when no kernel the search found beats PyTorch there.

A template's kernel can lose to the library the reference calls on some shapes and win on
others: a Triton GEMM against cuBLAS on a decode batch of one row, say. A composite that may
only choose among the search's kernels then keeps a loss on those shapes, where the reference
itself would do. So before composing, the optimizer judges this candidate once per problem,
like any other: the reference's `run`, destination-passing (its outputs copied into the
pre-allocated ones, a copy of the outputs' bytes the composite pays where it uses it). Its
per-workload times are measured, never assumed, and it is chosen only for the shapes where it
measured fastest. It has no Triton kernel, so it never gets a descriptor or a cell: it is a
part, never an elite of its own.
"""

from __future__ import annotations

from typing import Any

from solforge.data.definition import Definition

PROPOSER = "reference"
ENTRY_FILE = "reference_dps.py"


def reference_candidate(definition: Definition) -> dict[str, Any] | None:
    """The reference as a destination-passing solution JSON; None when an output has no
    shape (a Python scalar cannot be written into a buffer)."""
    if any(spec.shape is None for spec in definition.outputs.values()):
        return None
    names = tuple(definition.outputs)
    wrapper = (
        "\n\n# -- solforge: the reference above, destination-passing --\n"
        "_SOLFORGE_REFERENCE_RUN = run\n"
        f"_SOLFORGE_INPUTS = {len(definition.inputs)}\n"
        f"_SOLFORGE_OUTPUTS = {names!r}\n\n\n"
        "def run(*args):\n"
        "    result = _SOLFORGE_REFERENCE_RUN(*args[:_SOLFORGE_INPUTS])\n"
        "    if isinstance(result, dict):\n"
        "        result = [result[name] for name in _SOLFORGE_OUTPUTS]\n"
        "    elif not isinstance(result, (tuple, list)):\n"
        "        result = [result]\n"
        "    for out, value in zip(args[_SOLFORGE_INPUTS:], result):\n"
        "        out.copy_(value)\n"
    )
    return {
        "name": f"{definition.name}-reference",
        "definition": definition.name,
        "author": "solforge-compose",
        "description": ("The definition's reference (PyTorch eager), its outputs copied into "
                        "the pre-allocated ones: a composite's part for the shapes no searched "
                        "kernel beats it on."),
        "spec": {"languages": ["pytorch"], "target_hardware": [],
                 "entry_point": f"{ENTRY_FILE}::run", "destination_passing_style": True},
        "sources": [{"path": ENTRY_FILE, "content": definition.reference.rstrip() + wrapper}],
    }
