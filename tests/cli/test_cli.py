"""The command line as a newcomer meets it: help without torch and fast, one-line errors that
name the cause (and the extra to install), exit codes 0 / 1 / 2, `--db` paths and foreign
databases, progress lines when piped, tables that fit 80 columns."""

from __future__ import annotations

import importlib
import io
import json
import re
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness_corpus import HONEST, PROBLEMS
from rich.console import Console

from solforge import cli
from solforge.bench.results import Measured, ProblemResults
from solforge.bench.summary import problem_line, tier_lines
from solforge.cli import choices, main
from solforge.cli.bench import incomplete_problems, problem_tables, tier_table
from solforge.cli.problems import SuiteEntry, problems_table
from solforge.errors import SolforgeError
from solforge.failures import failure_cause, wrong_problem_hint
from solforge.humanize import fitness, number, plural, si_unit, time_range, time_unit
from solforge.storage import open_store, store_url

SRC = Path(cli.__file__).resolve().parents[2]
SMALL = PROBLEMS / "rmsnorm_small"
PYTHON = sys.executable


def run_main(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """`solforge ARGS` through the console entry point: exit status, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["solforge", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _subprocess(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})


# -- fast help ---------------------------------------------------------------------------------

def test_the_cli_imports_without_torch():
    done = _subprocess("import sys, solforge.cli; "
                       "print(sorted(m for m in ('torch', 'triton', 'sqlalchemy', 'numpy') "
                       "if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


COMMANDS = [[], ["bench"], ["eval"], ["analyze"], ["check"], ["optimize"], ["report"],
            ["export"], ["import-traces"], ["problems", "list"], ["hardware", "show"],
            ["hgemm", "tune"], ["archive", "show"], ["calibrate"], ["import", "kernelbench"]]

# Every command's help in one fresh interpreter: torch must stay unimported throughout. Printed:
# the CPU seconds of the import, of the slowest help, and whether torch was loaded.
_EVERY_HELP = f"""
import sys, time
from typer.testing import CliRunner
start = time.process_time()
from solforge.cli import app
imported = time.process_time() - start
slowest = 0.0
for command in {COMMANDS!r}:
    began = time.process_time()
    result = CliRunner().invoke(app, [*command, "--help"])
    slowest = max(slowest, time.process_time() - began)
    assert result.exit_code == 0 and "Usage" in result.output, (command, result.output)
print(imported, slowest, "torch" in sys.modules)
"""


def test_every_help_is_fast_and_imports_no_torch():
    """CPU time (what a busy machine cannot inflate) of importing the CLI plus its slowest
    command's help, which is what one `solforge X --help` pays: well under 1 s; torch is never
    imported by any of them."""
    done = _subprocess(_EVERY_HELP)
    assert done.returncode == 0, done.stderr
    imported, slowest, torch_loaded = done.stdout.split()
    assert torch_loaded == "False"
    assert float(imported) + float(slowest) < 1.0, (imported, slowest)


def test_solforge_help_takes_under_a_second():
    """The whole `solforge --help` process: its CPU time under 1 s; its wall time gets a
    generous bound for a busy two-core machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([PYTHON, "-m", "solforge", "--help"], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0 and "Usage" in done.stdout
    assert cpu < 1.0, cpu
    assert wall < 10.0, wall


def test_help_constants_match_the_modules_that_use_them():
    from solforge.harness.baseline import KINDS
    from solforge.problem.suite import TIERS
    from solforge.solar import DEFAULT_FP32_POLICY, FP32_POLICIES

    assert choices.TIERS == TIERS
    assert choices.FP32_POLICIES == FP32_POLICIES
    assert choices.DEFAULT_FP32_POLICY == DEFAULT_FP32_POLICY
    assert set(choices.BASELINES) == set(KINDS)


# -- errors ------------------------------------------------------------------------------------

def test_a_missing_extra_is_one_line_that_keeps_its_brackets(monkeypatch, capsys):
    def needs(module: str):
        def command() -> None:
            raise ModuleNotFoundError(f"No module named '{module}'", name=module)
        return command

    for module, extra in (("triton", "triton"), ("sqlalchemy.orm", "store"), ("ray", "ray"),
                          ("optuna", "tune")):
        monkeypatch.setattr(cli, "app", needs(module))
        code, _, err = run_main([], monkeypatch, capsys)
        assert code == 2
        assert f"pip install 'solforge[{extra}]'" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_solforge_error_keeps_bracketed_text(monkeypatch, capsys):
    def command() -> None:
        raise SolforgeError("the results store needs SQLAlchemy: pip install 'solforge[store]'")

    monkeypatch.setattr(cli, "app", command)
    code, _, err = run_main([], monkeypatch, capsys)
    assert code == 2 and "pip install 'solforge[store]'" in err


def test_an_unknown_module_is_a_real_bug_and_keeps_its_traceback(monkeypatch, capsys):
    def command() -> None:
        raise ModuleNotFoundError("No module named 'no_such_thing'", name="no_such_thing")

    monkeypatch.setattr(cli, "app", command)
    monkeypatch.setattr(sys, "argv", ["solforge"])
    with pytest.raises(ModuleNotFoundError):
        main()


SYNTAX_LOG = """loading the solution failed:
Traceback (most recent call last):
  File "/x/src/solforge/harness/worker.py", line 106, in start
    self.function = self._load_function()
  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import
  File "/root/.cache/solforge/builds/bad-c0bc9fc7f660aef5/kernel.py", line 2
    def run(x, w:
           ^
SyntaxError: '(' was never closed"""

NVCC_LOG = """nvcc -O3 kernel.cu
kernel.cu(12): warning: variable "y" was declared but never referenced
kernel.cu(17): error: identifier "blockIdy" is undefined
kernel.cu(20): error: expected a ";"
2 errors detected in the compilation of "kernel.cu"."""

GCC_LOG = """g++ -O3 -c binding.cpp
binding.cpp: In function 'void run()':
binding.cpp:8:5: error: 'foo' was not declared in this scope
    8 |     foo();"""


def test_the_cause_of_a_failure_is_one_line_with_its_place():
    expected = "SyntaxError: '(' was never closed (kernel.py, line 2)"
    assert failure_cause(SYNTAX_LOG.replace("/x/src/solforge", str(SRC / "solforge"))) == \
        expected
    assert failure_cause(NVCC_LOG) == ("kernel.cu(17): error: identifier \"blockIdy\" is "
                                       "undefined")
    assert failure_cause(GCC_LOG) == "binding.cpp:8:5: error: 'foo' was not declared in this scope"
    assert failure_cause("output 0 has shape (2, 3), expected (2, 4)") == \
        "output 0 has shape (2, 3), expected (2, 4)"
    assert failure_cause(None) == "(no log)"


def test_a_wrong_problem_gets_a_hint():
    named = wrong_problem_hint("rmsnorm_llama3_1_8b", "softmax_vocab", ["RuntimeError: x"])
    assert "written for 'rmsnorm_llama3_1_8b', not 'softmax_vocab'" in named
    unnamed = wrong_problem_hint("", "softmax_vocab",
                                 ["TypeError: run() missing 2 required positional arguments"])
    assert "did not accept the inputs of 'softmax_vocab'" in unnamed
    assert wrong_problem_hint("softmax_vocab", "softmax_vocab", ["ValueError: x"]) is None


# -- eval: exit codes, causes, the CPU baseline, progress --------------------------------------

@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_evaluate(statuses: list[str], log: str):
    """Stands in for the harness: one trace per status, failures with `log`."""
    from solforge.data.trace import (
        BaselineReport,
        Correctness,
        Environment,
        Evaluation,
        Performance,
        Status,
        Trace,
    )

    def evaluate(problem, solution, config, progress=None):
        traces = []
        for workload, status in zip(problem.workloads, statuses):
            passed = status == "PASSED"
            evaluation = Evaluation(
                status=Status(status), environment=Environment("CPU_x86_64", {}),
                timestamp="2026-12-01T00:00:00Z", log="" if passed else log,
                correctness=Correctness() if passed else None,
                performance=Performance(31.4, 0.0123, 0.0123 / 31.4) if passed else None,
                t_sol_ms=5.12e-6, sol_hardware="H200-SXM",
                baseline=BaselineReport(config.baseline, 0.0123, 0.0123, None))
            progress(f"{workload.uuid[:8]} {status}")
            traces.append(Trace(problem.name, solution.name, workload.to_dict(), evaluation))
        return traces

    return evaluate


def test_eval_exit_status_and_causes(tmp_path, monkeypatch, capsys):
    """What `eval` makes of the harness's traces (the harness itself is faked here; the real
    thing runs in the slow tests below): 0 when all passed, 1 with one line per failure."""
    harness = importlib.import_module("solforge.harness.evaluate")  # the module, not the function
    solution = tmp_path / "kernel.py"
    solution.write_text("def run(hidden_states, norm_weight, eps):\n    return hidden_states\n")
    args = ["eval", str(SMALL), str(solution), "--device", "cpu"]
    monkeypatch.setattr(harness, "evaluate", _fake_evaluate(["PASSED", "PASSED"], ""))
    code, out, err = run_main(args, monkeypatch, capsys)
    assert code == 0 and "2/2 workloads passed" in out
    assert "eager" in out  # the CPU's default baseline
    assert "PASSED" in err  # progress lines: stderr is not a terminal
    monkeypatch.setattr(harness, "evaluate", _fake_evaluate(["PASSED", "COMPILE_ERROR"],
                                                            NVCC_LOG))
    code, out, _ = run_main(args, monkeypatch, capsys)
    assert code == 1 and "1/2 workloads passed" in out
    assert ('COMPILE_ERROR: kernel.cu(17): error: identifier "blockIdy" is undefined'
            in " ".join(out.split()))
    assert "warning" not in out and "--verbose" in out
    code, out, _ = run_main([*args, "--verbose"], monkeypatch, capsys)
    assert code == 1 and "2 errors detected in the compilation" in out
    code, out, _ = run_main([*args, "--json"], monkeypatch, capsys)
    assert code == 1 and [json.loads(line)["evaluation"]["status"]
                          for line in out.splitlines()] == ["PASSED", "COMPILE_ERROR"]
    # A solution written for another problem: said before the run, hinted at after it.
    other = tmp_path / "softmax.json"
    other.write_text(json.dumps({
        "name": "softmax_kernel", "definition": "softmax_llama3_1_8b_vocab",
        "spec": {"languages": ["pytorch"], "entry_point": "kernel.py::run"},
        "sources": [{"path": "kernel.py", "content": solution.read_text()}]}))
    monkeypatch.setattr(harness, "evaluate", _fake_evaluate(
        ["RUNTIME_ERROR"], "Traceback (most recent call last):\nTypeError: run() missing 1 "
                           "required positional argument: 'eps'"))
    code, out, err = run_main(["eval", str(SMALL), str(other), "--device", "cpu"], monkeypatch,
                              capsys)
    assert code == 1
    assert "names the definition 'softmax_llama3_1_8b_vocab'" in " ".join(err.split())
    assert ("hint: the solution was written for 'softmax_llama3_1_8b_vocab', not "
            "'rmsnorm_small'") in " ".join(out.split())


@pytest.mark.slow
def test_eval_exits_1_with_the_cause_when_a_workload_fails(tmp_path, cache, monkeypatch,
                                                           capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\ndef run(hidden_states, norm_weight, eps:\n    pass\n")
    code, out, err = run_main(["eval", str(SMALL), str(broken), "--device", "cpu",
                               "--smallest", "1", "--timeout", "60"], monkeypatch, capsys)
    assert code == 1
    assert "COMPILE_ERROR: SyntaxError: '(' was never closed (kernel.py, line 3)" in out
    assert "--verbose" in out and "0/1 workload passed" in out
    assert "COMPILE_ERROR" in err  # a progress line per workload: stderr is not a terminal


@pytest.mark.slow
def test_eval_verbose_prints_the_whole_log(tmp_path, cache, monkeypatch, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\ndef run(hidden_states, norm_weight, eps):\n"
                      "    raise ValueError('no kernel yet')\n")
    code, out, _ = run_main(["eval", str(SMALL), str(broken), "--device", "cpu",
                             "--smallest", "1", "--verbose"], monkeypatch, capsys)
    assert code == 1
    assert "RUNTIME_ERROR: ValueError: no kernel yet (kernel.py, line 4)" in out
    assert "Traceback (most recent call last)" in out


@pytest.mark.slow
def test_eval_exits_0_when_all_passed_with_eager_as_the_cpu_baseline(tmp_path, cache,
                                                                     monkeypatch, capsys):
    solution = HONEST / "pytorch_rmsnorm" / "solution.py"
    traces = tmp_path / "traces.jsonl"
    code, out, err = run_main(["eval", str(SMALL), str(solution), "--device", "cpu",
                               "--smallest", "1", "-o", str(traces)], monkeypatch, capsys)
    assert code == 0, out + err
    assert "1/1 workload passed" in out and "CPU mode" in out
    record = json.loads(traces.read_text().splitlines()[0])
    assert record["evaluation"]["baseline"]["chosen"] == "eager"  # no torch.compile build


def test_eval_bad_input_exits_2(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(["eval", str(SMALL), str(tmp_path / "absent.py"), "--device", "cpu"],
                            monkeypatch, capsys)
    assert code == 2 and "no such file" in err and "Traceback" not in err
    code, _, err = run_main(["eval", str(SMALL), str(tmp_path / "absent.py"), "--baseline",
                             "fastest"], monkeypatch, capsys)
    assert code == 2 and "--baseline 'fastest'" in err


# -- the store: --db, foreign databases, read-only commands, nothing left behind ---------------

def test_db_takes_a_plain_path_or_a_url(tmp_path):
    assert store_url(None) == "sqlite:///solforge.db"
    assert store_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store_url(str(tmp_path / "x.db")) == f"sqlite:///{tmp_path / 'x.db'}"
    assert store_url("x.db") == "sqlite:///x.db"
    store = open_store(str(tmp_path / "plain.db"))
    assert (tmp_path / "plain.db").is_file() and store.url == f"sqlite:///{tmp_path / 'plain.db'}"


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        return {row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_foreign_database_is_refused_in_one_line_and_left_alone(tmp_path, monkeypatch,
                                                                  capsys):
    foreign = tmp_path / "app.db"
    _foreign(foreign)
    for args in (["report", "-o", str(tmp_path / "r.html")], ["export", "-o",
                                                              str(tmp_path / "t.jsonl")],
                 ["import-traces", str(tmp_path / "t.jsonl")]):
        code, _, err = run_main([*args, "--db", str(foreign)], monkeypatch, capsys)
        assert code == 2, args
        assert "is not a solforge results store" in err and "invoices" in err
        assert len(err.strip().splitlines()) == 1
    assert _tables(foreign) == {"invoices"}  # no solforge table was created in it
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_text("these are my notes, not a database\n" * 50)
    code, _, err = run_main(["report", "--db", str(not_sqlite)], monkeypatch, capsys)
    assert code == 2 and "file is not a database" in err and len(err.strip().splitlines()) == 1


def test_read_only_commands_create_nothing(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(["export", "-o", str(tmp_path / "t.jsonl"), "--db",
                             str(tmp_path / "none.db")], monkeypatch, capsys)
    assert code == 2 and "no results store at" in err
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "t.jsonl").exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # an existing file without any table
    code, _, err = run_main(["report", "--db", str(empty)], monkeypatch, capsys)
    assert code == 2 and "holds no solforge results" in err
    assert _tables(empty) == set()


def test_a_failed_command_leaves_no_database_behind(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    code, _, err = run_main(["import-traces", str(bad), "--db", str(tmp_path / "new.db")],
                            monkeypatch, capsys)
    assert code == 2 and "invalid JSON" in err
    assert not (tmp_path / "new.db").exists()
    code, _, _ = run_main(["bench", "l1/no_such_problem", "--device", "cpu", "--db",
                           str(tmp_path / "bench.db")], monkeypatch, capsys)
    assert code == 2 and not (tmp_path / "bench.db").exists()


# -- tables, numbers, progress -----------------------------------------------------------------

def _results(address: str, solution: str, passed: bool = True) -> ProblemResults:
    """T_SOL in ns and CPU times in ms, as the CPU mode measures them."""
    return ProblemResults(
        address=address, tier=address.split("/")[0], workloads=("a", "b"),
        t_sol_ms={"a": 5.12e-6, "b": 5.63e-5},
        references={"eager": {"a": Measured(True, 0.0123), "b": Measured(True, 0.0456)}},
        solutions={solution: {"a": Measured(True, 31.4), "b": Measured(passed, 75.2)}})


def _render(table, width: int = 80) -> str:
    out = Console(width=width, file=io.StringIO(), color_system=None)
    out.print(table)
    return out.file.getvalue()


def test_bench_tables_fit_80_columns_with_whole_numbers():
    results = [_results("l1/gemm_bias_gelu_whisper_large_v3_fc1", "triton_gemm_bias_gelu_tma"),
               _results("fib/gqa_paged_decode_llama3_1_70b_ps16", "triton_paged_decode")]
    lines = [problem_line(r, "eager", scored=False) for r in results]
    text = "".join(_render(table) for table in problem_tables(lines, "H200-SXM")) + _render(
        tier_table(tier_lines(results, "eager", scored=False)))
    assert max(len(line) for line in text.splitlines()) <= 80
    for header in ("T_SOL on H200-SXM", "T_SOL ns", "eager us", "x eager"):
        assert header in " ".join(text.split())
    assert "5.12-56.3" in text and "12.3-45.6" in text  # whole numbers, one unit per column
    assert "…" not in text and "..." not in text
    assert "S" not in text.split() and "compile" not in text  # nothing to show on the CPU
    # The geometric mean of 12.3 us / 31.4 ms and 45.6 us / 75.2 ms keeps its digits.
    assert f"{number(((0.0123 / 31.4) * (0.0456 / 75.2)) ** 0.5)}x" == "0.000487x"
    assert "0.000487x" in text


def test_bench_exits_1_when_a_solution_failed_a_workload():
    assert incomplete_problems([_results("l1/a", "s"), _results("l1/b", "s", passed=False)]) == \
        ["l1/b"]


def test_numbers_and_plurals():
    assert plural(1, "run") == "1 run" and plural(2, "run") == "2 runs"
    assert plural(0, "problem") == "0 problems"
    assert fitness(0.000392) == "0.000392" and fitness(0.8571) == "0.857"
    assert fitness(0.0) == "0"
    assert time_unit([5.12e-6, 0.028]) == ("us", 1e3)
    assert time_unit([31.4, 75.2]) == ("ms", 1.0)
    assert si_unit([24.6e3, 134e6], "B") == ("MB", 1e-6)
    assert number(12345.6) == "12,346" and number(0.00512) == "0.00512"
    assert time_range((0.0123, 0.0456), 1e3) == "12.3-45.6"
    assert time_range((), 1e3) == "-"


def test_bench_progress_prints_a_line_per_trace_when_piped():
    from solforge.bench.progress import ProgressBar
    from solforge.data.trace import Environment, Evaluation, Status, Trace

    out = Console(file=io.StringIO(), width=200)
    evaluation = Evaluation(status=Status.RUNTIME_ERROR, environment=Environment("CPU_x86_64", {}),
                            timestamp="2026-12-01T00:00:00Z")
    with ProgressBar(out) as bar:
        bar.start(total=2, skipped=0)
        for uuid in ("6cb55020-aaaa", "c67fc896-bbbb"):
            bar.working_on("rmsnorm")
            bar.saved(Trace("rmsnorm_small", "honest", {"uuid": uuid}, evaluation))
    lines = out.file.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "rmsnorm_small honest 6cb55020 RUNTIME_ERROR",
        "rmsnorm_small honest c67fc896 RUNTIME_ERROR"]
    assert lines[0].startswith("[1/2 ") and lines[1].startswith("[2/2 ")


def test_problems_list_json_keeps_whole_descriptions(monkeypatch, capsys):
    code, out, _ = run_main(["problems", "list", "--tier", "fib", "--json"], monkeypatch, capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and not any(row["summary"].endswith("...") for row in rows)
    assert max(len(row["summary"]) for row in rows) > 60  # longer than the table shows
    text = _render(problems_table([SuiteEntry(**{**row, "var_axes": tuple(row["var_axes"])})
                                   for row in rows]))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert f"{len(rows)} bundled problems" in text
    assert sum(line.lstrip().startswith("fib/") for line in text.splitlines()) == len(rows)


def test_analyze_json_is_json_lines_and_its_table_fits_80_columns(monkeypatch, capsys):
    code, out, _ = run_main(["analyze", str(SMALL), "--json"], monkeypatch, capsys)
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) > 1 and all("t_sol_ms" in r for r in records)
    from solforge.cli.analyze import _workload_table
    from solforge.hardware import load_profile
    from solforge.problem.suite import open_problem
    from solforge.solar import analyze_workload

    problem = open_problem("l1/rmsnorm_llama3_1_8b")
    profile = load_profile("H200")
    text = _render(_workload_table(problem, [analyze_workload(problem, w, profile)
                                             for w in problem.workloads[:2]]))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "T_SOL ns" in text and "5.12" in text and "56.3" in text


def test_optimize_exits_1_when_no_candidate_is_correct(tmp_path, monkeypatch, capsys):
    """The search itself is tested in test_optimize.py; here only what the command makes of an
    outcome with no correct candidate (status 1), and of an unknown problem (status 2)."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    import solforge.forge.loop as loop
    import solforge.runners as runners

    class NoLuck:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def run(self):
            return SimpleNamespace(judged=3, reused=0, hacks=1, elites=[], best=None,
                                   converged=False, confirmed=0, screened=0)

    @contextmanager
    def one_slot(*args, **options):
        yield SimpleNamespace(slots=1, machine=SimpleNamespace(hardware="CPU_x86_64"))

    monkeypatch.setattr(loop, "Optimizer", NoLuck)
    monkeypatch.setattr(runners, "open_runner", one_slot)
    code, out, _ = run_main(["optimize", str(SMALL), "--device", "cpu", "--budget", "3",
                             "--db", str(tmp_path / "forge.db")], monkeypatch, capsys)
    assert code == 1
    assert "judged 3 candidates (0 already in the store, 1 reward hack)" in out
    assert "no correct candidate yet" in out
    code, _, err = run_main(["optimize", "l1/no_such_problem", "--device", "cpu"], monkeypatch,
                            capsys)
    assert code == 2 and "solforge problems list" in err


def test_the_readme_counts_the_problems_the_code_ships():
    from solforge.problem.suite import bundled_problem_dirs

    readme = " ".join((SRC.parent / "README.md").read_text().split())
    total = re.search(r"holds (\d+) problems", readme)
    assert total and int(total.group(1)) == len(bundled_problem_dirs())
    for tier, pattern in (("l1", r"(\d+) single operators"), ("l2", r"(\d+) fused blocks"),
                          ("quant", r"(\d+) quantization problems"),
                          ("fib", r"(\d+) inference primitives")):
        found = re.search(pattern, readme)
        assert found and int(found.group(1)) == len(bundled_problem_dirs(tier)), tier


def test_bench_names_the_cause_of_each_failed_trace(tmp_path):
    from types import SimpleNamespace

    from solforge.bench.run import StoredProblem
    from solforge.cli.bench import failure_lines
    from solforge.data.trace import Environment, Evaluation, Status, Trace
    from solforge.problem import load_problem

    store = open_store(str(tmp_path / "bench.db"))
    problem = load_problem(SMALL)
    problem_id = store.problem_id(str(SMALL), problem, None)
    workload = problem.workloads[0]
    workload_id = store.workload_id(problem_id, workload, problem.axes(workload))
    solution = {"name": "broken", "definition": problem.name, "spec": {"languages": ["cuda"]},
                "sources": [{"path": "kernel.cu", "content": "x"}]}
    solution_id = store.solution_id(solution)
    evaluation = Evaluation(status=Status.COMPILE_ERROR, environment=Environment("CPU_x86_64",
                            {}), timestamp="2026-12-01T00:00:00Z", log=NVCC_LOG)
    trace = Trace(problem.name, "broken", workload.to_dict(), evaluation).to_dict()
    store.save_trace(None, workload_id, solution_id, "cpu", "CPU_x86_64", trace)
    outcome = SimpleNamespace(device="cpu", hardware="CPU_x86_64", problems=(StoredProblem(
        str(SMALL), None, {workload.uuid: workload_id}, {"broken": solution_id}),))
    assert failure_lines(store, outcome) == [
        f"{SMALL} broken {workload.uuid[:8]} COMPILE_ERROR: kernel.cu(17): error: identifier "
        "\"blockIdy\" is undefined"]
    assert failure_lines(store, outcome, limit=0) == ["... and 1 more failed traces"]
