"""`solforge optimize PROBLEM` and `solforge archive show PROBLEM`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.cli.tables import compact_table
from solforge.humanize import fitness, number, plural, time_unit
from solforge.storage import open_store, store_scope

console = make_console()
archive_app = typer.Typer(name="archive", help="The optimizer's MAP-Elites archive.",
                          no_args_is_help=True)
app.add_typer(archive_app)


@app.command()
def optimize(
    problem: str = typer.Argument(..., help="Problem folder or bundled tier/name."),
    budget: int = typer.Option(None, help="Candidates to judge."),
    minutes: float = typer.Option(None, "--time", help="Minutes to search."),
    proposer: str = typer.Option("templates", help="templates | llm | both"),
    llm_base_url: str = typer.Option(None, help="An OpenAI-compatible endpoint (vLLM, SGLang, "
                                                "Ollama, a hosted service)."),
    model: str = typer.Option(None, help="The model name at that endpoint."),
    db: str = typer.Option(None, help="The store: a SQLite file path or a database URL "
                                      "(default: ./solforge.db)."),
    runner: str = typer.Option("local", help="Where candidates run: local (a fresh process "
                                             "per candidate, one slot per GPU or core) or ray."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="With --runner ray: auto or HOST:PORT of the head node "
                                         "(default: start a Ray instance on this machine)."),
    workers: int = typer.Option(None, "--workers", help="Candidates judged at once (default: "
                                                        "one per GPU, per core on the CPU, or "
                                                        "the Ray cluster's)."),
    per_gpu: int = typer.Option(1, "--per-gpu", help="Local runner: candidates that share each GPU "
                                                     "(2-8): their correctness rounds side by "
                                                     "side, their timed calls one at a time."),
    device: str = typer.Option(None, help="cuda or cpu (default: cuda when present)."),
    hardware: str = typer.Option(None, help="Profile for T_SOL (default: the GPU, or H200)."),
    output: Path = typer.Option(None, "-o", help="Where to write the best solution JSON."),
    seed: int = typer.Option(0, help="Seed of the parameter search."),
    patience: int = typer.Option(None, help="End a search (a template's, or the model's) after "
                                            "this many candidates in a row without a gain of "
                                            "more than 1% in the best fitness (default: never)."),
    ncu: bool = typer.Option(True, "--ncu/--no-ncu", help="On a GPU with ncu on PATH, profile "
                                                          "the model's passing candidates and "
                                                          "show it the metrics."),
    compose: bool = typer.Option(True, "--compose/--no-compose",
                                 help="After the templates, judge one composite that sends "
                                      "each workload shape to the candidate fastest on it."),
    race: bool = typer.Option(True, "--race/--no-race",
                              help="Time each candidate briefly first, and in full only when it "
                                   "comes within 5% of the best (the others keep the brief "
                                   "timing, marked in the store)."),
) -> None:
    """Search for faster correct kernels; keep a quality-diversity archive; write the best.

    Exits 0 when a correct kernel was found, 1 when none was, 2 on bad input."""

    from solforge.defaults import resolve_run
    from solforge.forge.llm import LLMConfig
    from solforge.forge.loop import OptimizeConfig, Optimizer
    from solforge.problem.problem import load_problem
    from solforge.problem.suite import address_of, resolve_problem_dir, tier_of
    from solforge.runners import open_runner

    folder = resolve_problem_dir(problem)
    loaded = load_problem(folder)
    # How the runner's workers find it: a bundled tier/name, else the folder's absolute path.
    address = address_of(folder) if tier_of(folder) else str(folder.resolve())
    run = resolve_run(device, hardware, remote=runner == "ray")
    llm = LLMConfig(base_url=llm_base_url, model=model) if llm_base_url and model else None
    config = OptimizeConfig(budget=budget if budget or minutes else 20, minutes=minutes,
                            proposer=proposer, llm=llm, device=run.device, hardware=run.hardware,
                            baseline=run.baseline, seed=seed, ncu=ncu,
                            patience=patience, compose=compose, race=race)
    if run.device_type == "cpu":
        console.print("CPU mode: candidates run in Triton's interpreter on the smallest "
                      "workload; fitness is the speedup over eager PyTorch (no SOL score)",
                      highlight=False)
    with store_scope(db) as store, \
            open_runner(runner, run.device, workers, ray_address,
                        per_gpu=per_gpu) as task_runner:
        console.print(f"judging up to {plural(task_runner.slots, 'candidate')} at once on "
                      f"{task_runner.machine.hardware} ({runner} runner)", highlight=False)
        outcome = Optimizer(loaded, store, config,
                            lambda line: console.print(line, highlight=False, markup=False),
                            runner=task_runner, address=address).run()
    console.print(f"judged {plural(outcome.judged, 'candidate')} ({outcome.reused} already in "
                  f"the store, {plural(outcome.hacks, 'reward hack')}); "
                  f"{plural(len(outcome.elites), 'archive cell')} filled; "
                  f"{outcome.confirmed} timed again in full, {outcome.screened} kept brief"
                  f"{'; converged' if outcome.converged else ''}", highlight=False)
    if outcome.best is None:
        console.print("no correct candidate yet", highlight=False)
        raise typer.Exit(1)
    path = output or Path(f"{loaded.name}.best.json")
    path.write_text(json.dumps(outcome.best.solution, indent=1) + "\n")
    label = "speedup over eager" if run.device_type == "cpu" else "mean SOL score"
    console.print(f"best: {outcome.best.name} ({label} {fitness(outcome.best.fitness)}) in "
                  f"cell {outcome.best.cell} -> {path}", highlight=False)


@archive_app.command("show")
def archive_show(
    problem: str = typer.Argument(..., help="Problem folder or bundled tier/name."),
    db: str = typer.Option(None, help="The store: a SQLite file path or a database URL "
                                      "(default: ./solforge.db)."),
) -> None:
    """The archive's grid (memory path x compute path, best fitness of each) and its elites."""
    from solforge.forge.archive import elites
    from solforge.forge.descriptors import COMPUTE_PATHS, MEMORY_PATHS
    from solforge.problem.suite import open_problem

    loaded = open_problem(problem)
    found = elites(open_store(db, must_exist=True), loaded.name)
    if not found:
        console.print(f"the archive of {loaded.name} is empty", highlight=False)
        return
    grid = Table(title=f"{loaded.name}: best fitness per memory x compute path "
                       "(over parallel structure and tile class)", title_justify="left")
    grid.add_column("memory \\ compute")
    for compute in COMPUTE_PATHS:
        grid.add_column(compute, justify="right")
    for memory in MEMORY_PATHS:
        cells = []
        for compute in COMPUTE_PATHS:
            inside = [e.fitness for e in found if e.cell.split("/")[:2] == [memory, compute]]
            cells.append(fitness(max(inside)) if inside else "-")
        grid.add_row(memory, *cells)
    console.print(grid)
    unit, factor = time_unit(e.latency_ms for e in found if e.latency_ms is not None)
    columns = {
        "cell (memory/compute/parallel/tile)": [elite.cell for elite in found],
        "elite": [elite.name for elite in found],
        "fitness": [fitness(elite.fitness) for elite in found],
        f"T_k {unit}": ["-" if e.latency_ms is None else number(e.latency_ms * factor)
                        for e in found],
    }
    console.print(compact_table("elites, best first", columns,
                                text={"cell (memory/compute/parallel/tile)", "elite"}))
