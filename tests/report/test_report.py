"""`solforge report`: a store written through the Store API with real analyses of three bundled
problems and synthetic times set as multiples of each workload's T_SOL, rendered to HTML and
checked as text, as SVG and in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from html import unescape
from pathlib import Path

import pytest

from solforge.cli import main
from solforge.data.trace import (
    BaselineReport,
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Status,
    Trace,
)
from solforge.hardware import load_profile
from solforge.problem.suite import open_problem
from solforge.report import ReportError, gather, render
from solforge.solar import analyze_workload
from solforge.storage import StoreUnavailable, open_store
from solforge.store import Store

SVG = "{http://www.w3.org/2000/svg}"
GPU = "NVIDIA_H200"
CPU = "CPU_x86_64"
# problem address -> how many of its workloads the store holds
PROBLEMS = {"l1/rmsnorm_llama3_1_8b": 2, "l2/swiglu_mlp_llama3_1_8b": 3,
            "fib/paged_kv_append_llama3_1_8b_ps16": 1}
# Every GPU time is a multiple of the workload's T_SOL.
EAGER, COMPILE, FAST, SLOW = 4.0, 2.5, 1.25, 6.0
# S = (T_b - T_SOL) / ((T_k - T_SOL) + (T_b - T_SOL)) with T_b = compile, the faster baseline.
FAST_SCORE = (COMPILE - 1) / ((FAST - 1) + (COMPILE - 1))  # 0.857
SLOW_SCORE = (COMPILE - 1) / ((SLOW - 1) + (COMPILE - 1))  # 0.231
COMPILE_SCORE = (EAGER - 1) / ((COMPILE - 1) + (EAGER - 1))  # 0.667, T_b = eager


def _trace(problem: str, workload: str, solution: str, status: Status, latency_ms: float | None,
           eager_ms: float, compile_ms: float, t_sol_ms: float, platform: str,
           sol_hardware: str | None) -> dict:
    passed = status is Status.PASSED
    baseline_ms = min(eager_ms, compile_ms)
    evaluation = Evaluation(
        status=status, environment=Environment(platform, {"torch": "2.11.0"}),
        timestamp="2026-11-29T12:00:00Z",
        correctness=Correctness() if status in (Status.PASSED, Status.INCORRECT_NUMERICAL)
        else None,
        performance=Performance(latency_ms, baseline_ms, baseline_ms / latency_ms) if passed
        else None,
        t_sol_ms=t_sol_ms, sol_hardware=sol_hardware,
        baseline=BaselineReport("compile", baseline_ms, eager_ms, compile_ms))
    return Trace(problem, solution, {"uuid": workload}, evaluation).to_dict()


def _solution(problem: str, name: str) -> dict:
    return {"name": name, "definition": problem, "author": "tests",
            "spec": {"languages": ["triton"]}, "sources": [{"path": "k.py", "content": name}]}


def _fill(store: Store, analyzed: bool = True) -> None:
    """Two runs: the H200 (every problem, three candidates) and the CPU (one workload)."""
    profile = load_profile("H200")
    gpu_run = store.begin_run("solforge bench --suite tests", "cuda", "H200",
                              {"gpu": "NVIDIA H200", "driver": "580.1",
                               "libs": {"torch": "2.11.0"}, "clocks_at_start_mhz": None})
    cpu_run = store.begin_run("solforge bench --device cpu", "cpu", "H200", {"torch": "2.13.0"})
    for address, count in PROBLEMS.items():
        problem = open_problem(address)
        problem_id = store.problem_id(address, problem, address.split("/")[0])
        ids = {name: store.solution_id(_solution(problem.name, name))
               for name in ("reference:eager", "reference:compile", "triton_fast", "cuda_slow")}
        for index, workload in enumerate(problem.workloads[:count]):
            workload_id = store.workload_id(problem_id, workload, problem.axes(workload))
            analysis = analyze_workload(problem, workload, profile)
            if analyzed:
                store.save_analysis(workload_id, analysis.to_json())
            sol = analysis.t_sol_ms
            slow_status = Status.INCORRECT_NUMERICAL if index == 0 else Status.PASSED
            times = {"reference:eager": (Status.PASSED, EAGER * sol),
                     "reference:compile": (Status.PASSED, COMPILE * sol),
                     "triton_fast": (Status.PASSED, FAST * sol),
                     "cuda_slow": (slow_status, SLOW * sol if index else None)}
            for name, (status, latency_ms) in times.items():
                trace = _trace(problem.name, workload.uuid, name, status, latency_ms,
                               EAGER * sol, COMPILE * sol, sol, GPU, profile.name)
                store.save_trace(gpu_run, workload_id, ids[name], "cuda", GPU, trace)
            if address.startswith("l1/") and index == 0:
                cpu_times = {"reference:eager": 1.0, "reference:compile": 0.8, "triton_fast": 2.0}
                for name, latency_ms in cpu_times.items():
                    trace = _trace(problem.name, workload.uuid, name, Status.PASSED, latency_ms,
                                   1.0, 0.8, sol, CPU, None)
                    store.save_trace(cpu_run, workload_id, ids[name], "cpu", CPU, trace)
    store.finish_run(gpu_run)
    store.finish_run(cpu_run)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'results.db'}"
    _fill(Store(url))
    return url


@pytest.fixture(scope="module")
def page(store_url, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render(gather(open_store(store_url, must_exist=True))))
    return path


def _table_rows(html: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.DOTALL)
    assert table, f"no table {table_id}"
    body = table.group(0).split("<tbody>")[1]
    return [[unescape(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)]


def _svgs(html: str) -> list[ElementTree.Element]:
    return [ElementTree.fromstring(text)
            for text in re.findall(r"<svg\b.*?</svg>", html, re.DOTALL)]


def _group(svg: ElementTree.Element, gid: str) -> ElementTree.Element | None:
    return next((g for g in svg.iter(f"{SVG}g") if g.get("id") == gid), None)


def _marks(svg: ElementTree.Element, gid: str) -> list[ElementTree.Element]:
    """The drawn markers of one series (each a <use> of the marker path)."""
    group = _group(svg, gid)
    return [] if group is None else list(group.iter(f"{SVG}use"))


def _mean_y(marks: list[ElementTree.Element]) -> float:
    return sum(float(mark.get("y")) for mark in marks) / len(marks)


@pytest.mark.slow
def test_leaderboard_ranks_by_mean_score(page):
    html = page.read_text()
    rows = _table_rows(html, "leaderboard-table")
    by_key = {(r[1], r[2], r[4]): r for r in rows}
    columns = ["rank", "solution", "problem", "author", "platform", "workloads", "PASSED",
               "failed", "mean S", "geomean speedup"]
    fast = dict(zip(columns, by_key["triton_fast", "l1/rmsnorm_llama3_1_8b", GPU]))
    assert fast["mean S"] == f"{FAST_SCORE:.3f}"
    assert fast["geomean speedup"] == f"{COMPILE / FAST:.3g}x"
    assert (fast["workloads"], fast["PASSED"], fast["failed"]) == ("2", "2", "-")
    slow = dict(zip(columns, by_key["cuda_slow", "l2/swiglu_mlp_llama3_1_8b", GPU]))
    assert slow["mean S"] == f"{2 * SLOW_SCORE / 3:.3f}"  # a failure scores 0: mean of 0, S, S
    assert (slow["PASSED"], slow["failed"]) == ("2", "INCORRECT_NUMERICAL 1")
    # Ranked: every triton_fast row on the GPU first; the CPU timing (no S) is not ranked.
    assert [r[1] for r in rows[:3]] == ["triton_fast"] * 3
    assert [r[0] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert all(r[4] == GPU for r in rows)
    unranked = _table_rows(html, "unranked-table")
    assert len(unranked) == 1
    assert unranked[0][3] == f"{CPU} (CPU timing)" and unranked[0][7] == "-"
    assert unranked[0][8] == f"{0.8 / 2.0:.3g}x"  # CPU against the CPU baseline only


@pytest.mark.slow
def test_problem_table_rows(page):
    rows = _table_rows(page.read_text(), "problems-table")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("l1", "l1/rmsnorm_llama3_1_8b", GPU),
        ("l1", "l1/rmsnorm_llama3_1_8b", f"{CPU} (CPU timing)"),
        ("l2", "l2/swiglu_mlp_llama3_1_8b", GPU),
        ("fib", "fib/paged_kv_append_llama3_1_8b_ps16", GPU),
    ]
    swiglu = rows[2]
    assert swiglu[3] == "3"
    assert " – " in swiglu[4]  # T_SOL range over three workloads
    assert swiglu[7] == f"{COMPILE_SCORE:.3f}"
    assert swiglu[8:] == ["triton_fast", f"{FAST_SCORE:.3f}", f"{COMPILE / FAST:.3g}x"]
    assert rows[1][7] == "-" and rows[1][9] == "-"  # no S for CPU timings


@pytest.mark.slow
def test_charts_are_inline_svg_with_every_series(page):
    html = page.read_text()
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "")  # loads nothing
    strip, roof = _svgs(html)[:2]
    # Scores: one point per GPU workload and tier, for the best candidate and for compile.
    for tier, count in (("l1", 2), ("l2", 3), ("fib", 1)):
        assert len(_marks(strip, f"scores-best-{tier}")) == count
        assert len(_marks(strip, f"scores-compile-{tier}")) == count
    # Roofline: the 5 GPU workloads with FLOPs (the KV append has none); CPU timings are out.
    assert len(_marks(roof, "roofline-eager")) == 5
    assert len(_marks(roof, "roofline-compile")) == 5
    fast, slow = _marks(roof, "roofline-solution-0"), _marks(roof, "roofline-solution-1")
    assert (len(fast), len(slow)) == (5, 3)  # cuda_slow failed one workload of each problem
    # Faster means more FLOP/s: higher on the page (smaller SVG y).
    assert _mean_y(fast) < _mean_y(_marks(roof, "roofline-compile")) < _mean_y(
        _marks(roof, "roofline-eager"))
    for ceiling in ("ceiling-dram", "ceiling-simt.fp32", "ceiling-tensor.bf16"):
        group = _group(roof, ceiling)
        assert group is not None and group.find(f".//{SVG}path") is not None, ceiling


def test_per_workload_charts_draw_every_platform(page):
    cpu_times, cpu_speedups, gpu_times, gpu_speedups = _svgs(page.read_text())[2:]
    # The GPU: 6 workloads, each with T_SOL, both baselines and triton_fast; cuda_slow passed 3.
    for series, count in (("times-tsol", 6), ("times-eager", 6), ("times-compile", 6),
                          ("times-solution-0", 6), ("times-solution-1", 3)):
        assert len(_marks(gpu_times, series)) == count, series
    # Faster is further left (smaller SVG x) on the time axis.
    def mean_x(marks):
        return sum(float(m.get("x")) for m in marks) / len(marks)
    assert (mean_x(_marks(gpu_times, "times-tsol")) < mean_x(_marks(gpu_times,
            "times-solution-0")) < mean_x(_marks(gpu_times, "times-eager")))
    assert len(_marks(gpu_speedups, "speedup-solution-0")) == 6
    # The CPU: one workload, its times and its 0.5x speedup, all drawn though nothing is scored.
    assert len(_marks(cpu_times, "times-eager")) == 1
    assert len(_marks(cpu_times, "times-solution-0")) == 1
    assert len(_marks(cpu_speedups, "speedup-solution-0")) == 1


def test_a_cpu_only_store_gets_charts_and_no_ranking(store_url):
    html = render(gather(open_store(store_url, must_exist=True), [2]))  # run 2: the CPU run
    assert "leaderboard-table" not in html and "Nothing to rank" in html
    assert len(_table_rows(html, "unranked-table")) == 1
    svgs = _svgs(html)
    assert len(svgs) == 2  # times and speedups; no score strip, no roofline
    assert _marks(svgs[0], "times-eager") and _marks(svgs[1], "speedup-solution-0")
    assert "measure the interpreter, not a kernel" in html


@pytest.mark.slow
def test_header_names_runs_and_versions(page):
    html = page.read_text()
    runs = _table_rows(html, "runs-table")
    assert [r[0] for r in runs] == ["1", "2"]
    assert "gpu=NVIDIA H200" in runs[0][7] and "libs.torch=2.11.0" in runs[0][7]
    assert "clocks" not in runs[0][7]  # unknown values are left out
    assert runs[0][4:7] == ["cuda", "H200", GPU]
    assert "left out of every SOL score and of the roofline (1 of 7" in html


@pytest.mark.slow
def test_run_filter_shows_only_that_run(store_url):
    data = gather(open_store(store_url), [2])
    assert [r.id for r in data.runs] == [2]
    assert {r.platform for r in data.results} == {CPU}
    with pytest.raises(ReportError, match="has no run 9"):
        gather(open_store(store_url), [9])


def test_store_without_analyses_renders_a_clear_page(tmp_path):
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    _fill(Store(url), analyzed=False)
    html = render(gather(open_store(url)))
    svgs = _svgs(html)
    # No score strip and no roofline; the per-workload times and speedups are still drawn.
    assert not any(_group(svg, "scores-best-l1") or _group(svg, "ceiling-dram") for svg in svgs)
    assert any(_marks(svg, "times-eager") for svg in svgs)
    assert not any(_group(svg, "times-tsol") for svg in svgs)  # no analysis, no T_SOL
    assert "No workload could be scored" in html
    assert "nothing to place on a roofline" in html
    assert "with no speed-of-light analysis in the store: 7" in html


def test_missing_or_empty_store_is_an_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    with pytest.raises(StoreUnavailable, match="no results store at"):
        open_store(f"sqlite:///{tmp_path / 'absent.db'}", must_exist=True)
    assert not (tmp_path / "absent.db").exists()
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(empty)
    monkeypatch.setattr(sys, "argv", ["solforge", "report", "--db", empty,
                                      "-o", str(tmp_path / "r.html")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "holds no traces" in error and "Traceback" not in error


@pytest.mark.slow
def test_cli_writes_the_page(store_url, tmp_path, monkeypatch, capsys):
    output = tmp_path / "out" / "report.html"
    monkeypatch.setattr(sys, "argv", ["solforge", "report", "--db", store_url, "-o", str(output)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)
    assert "wrote" in capsys.readouterr().out
    # score strip, roofline, and times + speedups for each of the two platforms
    assert output.read_text().count("<svg") == 6


# ---- headless Chromium -----------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium; .ci/run "
                             "installs it)")


def _chromium(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM after load, and the console messages Chromium logged (it logs each one,
    whatever its level, as a CONSOLE line on stderr)."""
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
    return done.stdout, console


@needs_chromium
def test_chromium_catches_a_console_error(tmp_path):
    """The check below would pass vacuously if Chromium's console lines went unseen."""
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><script>missing();</script></body></html>")
    _, console = _chromium(broken, tmp_path / "profile")
    assert any("missing is not defined" in line for line in console)


@pytest.mark.slow
@needs_chromium
def test_chromium_renders_the_page_without_console_errors(page, tmp_path):
    dom, console = _chromium(page, tmp_path / "profile")
    assert console == []
    assert 'data-sortable="ready"' in dom  # the script ran to its end
    assert dom.count("<svg") == 6
    for gid in ("scores-best-l1", "roofline-eager", "roofline-solution-0", "ceiling-dram"):
        assert f'id="{gid}"' in dom
    assert dom.count("<use") == page.read_text().count("<use")  # every marker is in the DOM


@pytest.mark.slow
@needs_chromium
def test_clicking_a_header_sorts_the_table(page, tmp_path):
    clicked = tmp_path / "clicked.html"
    probe = ("<script>var header = document.querySelector('#leaderboard-table th');"
             "header.click();"  # rank, descending: the last-ranked row comes first
             "var first = document.querySelector('#leaderboard-table tbody tr');"
             "document.body.setAttribute('data-first-rank', first.cells[0].textContent);"
             "</script></body>")
    clicked.write_text(page.read_text().replace("</body>", probe))
    dom, console = _chromium(clicked, tmp_path / "profile")
    assert console == []
    rows = len(_table_rows(page.read_text(), "leaderboard-table"))
    assert f'data-first-rank="{rows}"' in dom
    assert 'aria-sort="descending"' in dom
