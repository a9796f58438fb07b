"""The report page: one self-contained HTML file (inline CSS, inline SVG charts, a few lines of
inline JavaScript that sort a table when its header is clicked). It loads nothing, so it opens
the same on a machine without network and can be attached to an issue as is.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from solforge.errors import HardwareError
from solforge.hardware import HardwareProfile, load_profile
from solforge.humanize import duration_ms, plural
from solforge.report.charts import roofline, score_strip, workload_speedups, workload_times
from solforge.report.data import MeasuredWorkload, ReportData, RunInfo
from solforge.report.tables import (
    ProblemSummary,
    Standing,
    problem_summaries,
    standings,
)

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 13px; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #e4e4e4; text-align: right; }
th { background: #f4f4f4; cursor: pointer; white-space: nowrap; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
td.text, th.text { text-align: left; }
td:not(.text) { white-space: nowrap; }
.wide { overflow-x: auto; }
.cpu { color: #8a5a00; }
td.cpu { white-space: nowrap; }
.empty { color: #666; font-style: italic; }
figure { margin: 1em 0; }
figure svg { width: 100%; max-width: 880px; height: auto; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""

# Click a header to sort its table; a cell's data-value (a number) sorts before its text.
_SORT_SCRIPT = """
(function () {
  function key(row, column) {
    var cell = row.cells[column];
    var value = cell.getAttribute("data-value");
    return value === null ? cell.textContent.trim() : Number(value);
  }
  function compare(a, b) {
    if (typeof a === "number" && typeof b === "number") { return a - b; }
    return String(a).localeCompare(String(b));
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (header, column) {
      header.addEventListener("click", function () {
        var descending = header.getAttribute("aria-sort") !== "descending";
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var order = compare(key(a, column), key(b, column));
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
        table.querySelectorAll("thead th").forEach(function (other) {
          other.removeAttribute("aria-sort");
        });
        header.setAttribute("aria-sort", descending ? "descending" : "ascending");
      });
    });
  });
  document.body.setAttribute("data-sortable", "ready");
})();
"""


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, and the number it sorts by (text when None)."""

    text: str
    value: float | None = None
    css: str = ""  # "text": left-aligned (numbers are right-aligned); "cpu": a CPU timing


def render(data: ReportData) -> str:
    """The whole page for the gathered `data`."""
    generated_at = datetime.datetime.now(datetime.timezone.utc)
    results = data.results
    sections = [
        _header(data, generated_at),
        _runs_section(data.runs),
        _notes_section(results),
        _scores_section(results),
        _roofline_section(results),
        _workloads_section(results),
        _problems_section(problem_summaries(results)),
        _leaderboard_section(standings(results)),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<title>solforge report</title>\n"
            f"<style>{_CSS}</style>\n</head>\n<body>\n" + "\n".join(sections)
            + f"\n<script>{_SORT_SCRIPT}</script>\n</body>\n</html>\n")


def _header(data: ReportData, generated_at: datetime.datetime) -> str:
    results = data.results
    problems = {r.problem for r in results}
    solutions = {c.solution for r in results for c in r.candidates}
    platforms = sorted({r.platform for r in results})
    return (f"<header>\n<h1>solforge report</h1>\n<p>Generated {_date(generated_at)} from "
            f"<code>{escape(data.url)}</code>: {plural(len(results), 'workload measurement')} "
            f"of {plural(len(problems), 'problem')}, "
            f"{plural(len(solutions), 'candidate solution')}, measured on "
            f"{escape(', '.join(platforms))}.</p>\n</header>")


def _runs_section(runs: Sequence[RunInfo]) -> str:
    if not runs:
        return _section("runs", "Runs", '<p class="empty">The traces shown belong to no run.</p>')
    columns = ["run", "started", "finished", "status", "device", "T_SOL priced on",
               "measured on", "environment", "command"]
    rows = [[Cell(str(run.id), run.id), Cell(_date(run.started_at), css="text"),
             Cell(_date(run.finished_at) if run.finished_at else "-", css="text"),
             Cell(run.status, css="text"), Cell(run.device, css="text"),
             Cell(run.hardware, css="text"), Cell(", ".join(run.platforms), css="text"),
             Cell(_environment(run.environment), css="text"), Cell(run.command, css="text")]
            for run in runs]
    return _section("runs", "Runs", _table("runs-table", columns, rows))


def _notes_section(results: Sequence[MeasuredWorkload]) -> str:
    cpu = sum(r.cpu_timing for r in results)
    unanalyzed = sum(r.sol is None for r in results)
    flopless = sum(r.sol is not None and r.sol.flops == 0 and not r.cpu_timing for r in results)
    notes = [
        "SOL score S = (T_b &minus; T_SOL) / ((T_k &minus; T_SOL) + (T_b &minus; T_SOL)): 0.5 at "
        "the baseline, 1 at the speed of light. T_b is the faster of eager and torch.compile "
        "(torch.compile's own S takes T_b = eager). A candidate that failed scores 0; a time "
        "under T_SOL gets no score. Speedups are over the faster baseline, averaged "
        "geometrically over the workloads that passed.",
        f"CPU timings (<code>--device cpu</code>) are labelled <span class=\"cpu\">CPU "
        f"timing</span>: they are compared with the CPU baseline only and left out of every SOL "
        f"score and of the roofline ({cpu} of {len(results)} workload measurements here).",
        "Roofline: achieved FLOP/s counts every FLOP of the workload; each flat ceiling is one "
        "compute unit's peak (the unit whose FLOPs take longest at its peak).",
    ]
    if unanalyzed:
        notes.append(f"Workload measurements with no speed-of-light analysis in the store: "
                     f"{unanalyzed}. They have no T_SOL, no SOL score and no roofline point.")
    if flopless:
        notes.append(f"GPU workload measurements that do no arithmetic (pure data movement): "
                     f"{flopless}. They are scored, but have no place on the log-scale "
                     f"roofline.")
    items = "\n".join(f"<li>{note}</li>" for note in notes)
    return _section("notes", "How to read this page", f"<ul>\n{items}\n</ul>")


def _scores_section(results: Sequence[MeasuredWorkload]) -> str:
    chart = score_strip(results)
    if chart is None:
        body = ('<p class="empty">No workload could be scored: that needs a GPU timing, a '
                "timed baseline and a speed-of-light analysis in the store.</p>")
    else:
        body = (f"<figure>{chart}<figcaption>Each point is one workload: S of its best "
                "candidate, and S of torch.compile against eager.</figcaption></figure>")
    return _section("scores", "SOL score per tier", body)


def _roofline_section(results: Sequence[MeasuredWorkload]) -> str:
    hardware = sorted({r.sol.hardware for r in results if r.sol is not None and not r.cpu_timing})
    figures = []
    for name in hardware:
        profile, no_ceilings = _profile(name)
        chart = roofline(results, name, profile)
        if chart is None:
            continue
        caption = no_ceilings or f"Ceilings from {escape(profile.describe())}."
        figures.append(f"<figure>{chart}<figcaption>{caption}</figcaption></figure>")
    if not figures:
        figures.append('<p class="empty">No GPU timing of a workload with FLOPs and a '
                       "speed-of-light analysis: nothing to place on a roofline.</p>")
    return _section("roofline", "Roofline", "\n".join(figures))


def _workloads_section(results: Sequence[MeasuredWorkload]) -> str:
    """Times and speedups per workload for each platform: drawn from whatever the store holds,
    scored or not, so CPU-mode results are charted too (and labelled as CPU timings)."""
    figures = []
    for platform in sorted({r.platform for r in results}):
        cpu = any(r.cpu_timing for r in results if r.platform == platform)
        label = (" CPU timings: Triton solutions run in its interpreter (Python), so these "
                 "speedups measure the interpreter, not a kernel; nothing here is scored."
                 if cpu else "")
        for chart, what in ((workload_times(results, platform), "Measured times"),
                            (workload_speedups(results, platform), "Speedups over eager")):
            if chart is not None:
                figures.append(f"<figure>{chart}<figcaption>{what} per workload on "
                               f"{escape(platform)}.{label}</figcaption></figure>")
    if not figures:
        figures.append('<p class="empty">No timed workload in the store.</p>')
    return _section("workloads", "Per workload", "\n".join(figures))


def _problems_section(rows: Sequence[ProblemSummary]) -> str:
    columns = ["tier", "problem", "platform", "workloads", "T_SOL", "eager", "torch.compile",
               "compile S", "best solution", "its mean S", "its speedup"]
    cells = []
    for row in rows:
        best = row.best
        cells.append([
            Cell(row.tier or "-", css="text"), Cell(row.problem, css="text"),
            _platform(row.platform, row.cpu_timing), Cell(str(row.workloads), row.workloads),
            _time_range(row.t_sol_ms), _time_range(row.eager_ms), _time_range(row.compile_ms),
            _score(row.compile_score), Cell(best.solution if best else "-", css="text"),
            _score(best.mean_score if best else None),
            _speedup(best.geomean_speedup if best else None),
        ])
    return _section("problems", "Problems", _table("problems-table", columns, cells))


def _leaderboard_section(rows: Sequence[Standing]) -> str:
    """Only what has a SOL score is ranked; CPU timings and rows without a score are listed
    below, unranked: a speedup of an interpreter on a CPU says nothing about a kernel."""
    if not rows:
        return _section("leaderboard", "Leaderboard",
                        '<p class="empty">No candidate solution was evaluated, only the '
                        "reference baselines.</p>")
    scored = [row for row in rows if row.mean_score is not None and not row.cpu_timing]
    unscored = [row for row in rows if row not in scored]
    columns = ["solution", "problem", "author", "platform", "workloads", "PASSED", "failed",
               "mean S", "geomean speedup"]
    parts = []
    if scored:
        cells = [[Cell(str(rank), rank), *_standing_cells(row)]
                 for rank, row in enumerate(scored, start=1)]
        parts.append("<p>Ranked by mean S over each solution's workloads (a failed workload "
                     "scores 0), then by workloads passed, then by geometric-mean speedup.</p>"
                     + _table("leaderboard-table", ["rank", *columns], cells))
    else:
        parts.append('<p class="empty">Nothing to rank: no candidate has a SOL score (that '
                     "needs GPU timings and a speed-of-light analysis).</p>")
    if unscored:
        parts.append("<h3>Not ranked</h3><p>CPU timings and candidates without a score: "
                     "listed, not ranked. A CPU speedup compares the CPU runs of a solution "
                     "and of eager PyTorch only.</p>"
                     + _table("unranked-table", columns, [_standing_cells(r) for r in unscored]))
    return _section("leaderboard", "Leaderboard", "\n".join(parts))


def _standing_cells(row: Standing) -> list[Cell]:
    return [Cell(row.solution, css="text"), Cell(row.problem, css="text"),
            Cell(row.author or "-", css="text"), _platform(row.platform, row.cpu_timing),
            Cell(str(row.workloads), row.workloads), Cell(str(row.passed), row.passed),
            Cell(", ".join(f"{status} {count}" for status, count in row.failures) or "-",
                 row.workloads - row.passed, css="text"),
            _score(row.mean_score), _speedup(row.geomean_speedup)]


def _profile(name: str) -> tuple[HardwareProfile | None, str | None]:
    """The profile a T_SOL was priced on, or why the roofline has no ceilings."""
    try:
        return load_profile(name), None
    except HardwareError as exc:
        return None, escape(f"No ceilings: the profile {name!r} cannot be loaded ({exc}).")


def _table(table_id: str, columns: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    lefts = ["text" in cell.css for cell in rows[0]] if rows else [False] * len(columns)
    head = "".join(f'<th class="text">{escape(c)}</th>' if left else f"<th>{escape(c)}</th>"
                   for c, left in zip(columns, lefts))
    body = "\n".join("<tr>" + "".join(_cell(cell) for cell in row) + "</tr>" for row in rows)
    return (f'<div class="wide"><table class="sortable" id="{table_id}">\n'
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table></div>")


def _cell(cell: Cell) -> str:
    attributes = f' class="{cell.css}"' if cell.css else ""
    if cell.value is not None:
        attributes += f' data-value="{_sort_value(cell.value)}"'
    return f"<td{attributes}>{escape(cell.text)}</td>"


def _sort_value(value: float) -> str:
    """The number as JavaScript's Number() reads it back (it spells infinity out)."""
    if value == float("-inf"):
        return "-Infinity"
    return f"{value:.17g}"


def _section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{section_id}">\n<h2>{escape(title)}</h2>\n{body}\n</section>'


def _platform(platform: str, cpu_timing: bool) -> Cell:
    if cpu_timing:
        return Cell(f"{platform} (CPU timing)", css="text cpu")
    return Cell(platform, css="text")


def _score(score: float | None) -> Cell:
    # A missing score sorts below every real one.
    return Cell("-", float("-inf")) if score is None else Cell(f"{score:.3f}", score)


def _speedup(factor: float | None) -> Cell:
    return Cell("-", float("-inf")) if factor is None else Cell(f"{factor:.3g}x", factor)


def _time_range(span: tuple[float, float] | None) -> Cell:
    if span is None:
        return Cell("-", float("-inf"))
    low, high = span
    text = duration_ms(low) if low == high else f"{duration_ms(low)} – {duration_ms(high)}"
    return Cell(text, low)


def _date(moment: datetime.datetime) -> str:
    """The store writes UTC; SQLite gives it back without a time zone."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _environment(environment: dict[str, Any]) -> str:
    """GPU, driver and library versions as `key=value` pairs; one level of nesting flattened."""
    pairs = []
    for key, value in environment.items():
        if isinstance(value, dict):
            pairs += [f"{key}.{sub}={inner}" for sub, inner in value.items()
                      if inner is not None]
        elif value is not None:
            pairs.append(f"{key}={value}")
    return ", ".join(pairs) or "-"
