"""The Typer application every command module registers on."""

import typer

app = typer.Typer(
    name="solforge",
    help="Measure GPU kernels against the hardware's speed of light, and forge faster ones.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """solforge: how far is a kernel from the speed of light, and find one closer to it."""
