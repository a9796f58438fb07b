"""Parameterised Triton kernels per op family: the forge's first candidates.

    from solforge.forge.templates import templates_for
    for template in templates_for(problem.definition):
        solution = template.render(params, problem)  # a FlashInfer-Bench solution JSON

Each family module defines its templates (template.py says what a template is); `TEMPLATES`
lists them all, in family order.
"""

from solforge.data.definition import Definition
from solforge.forge.templates import (
    activation,
    attention,
    cross_entropy,
    gemm,
    gemm_scaled,
    moe,
    rope,
    row_norm,
    softmax,
)
from solforge.forge.templates.template import (
    Params,
    ParamValue,
    Template,
    TemplateError,
)

TEMPLATES: tuple[Template, ...] = (
    activation.TEMPLATE,
    row_norm.TEMPLATE,
    softmax.TEMPLATE,
    cross_entropy.TEMPLATE,
    rope.TEMPLATE,
    *gemm.TEMPLATES,
    *attention.TEMPLATES,
    moe.TEMPLATE,
    gemm_scaled.TEMPLATE,
)
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(template.family for template in TEMPLATES))


def templates_for(definition: Definition) -> list[Template]:
    """The templates that can solve this problem (each probes its reference once)."""
    return [template for template in TEMPLATES if template.applies(definition)]


def template_named(name: str) -> Template:
    for template in TEMPLATES:
        if template.name == name:
            return template
    known = ", ".join(template.name for template in TEMPLATES)
    raise TemplateError(f"no template named {name!r} (known: {known})")


__all__ = [
    "FAMILIES",
    "TEMPLATES",
    "ParamValue",
    "Params",
    "Template",
    "TemplateError",
    "template_named",
    "templates_for",
]
