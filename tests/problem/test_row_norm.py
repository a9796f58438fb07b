"""Row normalisations recognised from the structure and a run of the reference: the norm, the
weight's form and the fused residual, for the forge's template and the library baseline alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from solforge.problem.row_norm import recognise_row_norm
from solforge.problem.suite import open_problem


@pytest.mark.parametrize(("address", "norm", "weight_mode", "residual"), [
    ("l1/rmsnorm_llama3_1_8b", "rms", "scale_rounded", False),  # HF Llama: round, then scale
    ("l1/rmsnorm_gemma3_27b", "rms", "offset", False),  # 1 + weight
    ("l1/layernorm_whisper_large_v3", "layer", "scale", False),
    ("l1/add_rmsnorm_llama3_1_8b", "rms", "scale_rounded", True),
])
def test_the_norm_and_its_weight_are_read_off_the_reference(address, norm, weight_mode,
                                                             residual):
    roles = recognise_row_norm(open_problem(address).definition)
    assert roles is not None
    assert (roles.norm, roles.weight_mode, roles.residual is not None) == \
        (norm, weight_mode, residual)


def test_a_reference_that_drops_the_weight_is_no_known_form():
    definition = open_problem("l1/rmsnorm_llama3_1_8b").definition
    reference = definition.reference.replace("return", "return 3.0 *", 1)
    assert reference != definition.reference
    assert recognise_row_norm(replace(definition, reference=reference)) is None
