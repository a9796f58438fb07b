"""The whole bundled suite, whatever is in it: every problem checks on the CPU, has real shapes
beyond its tiny one, and is fully costed by the analysis; and its addresses work on the CLI.

Problems are discovered with `bundled_problem_dirs`, so a problem added to src/solforge/problems/
is covered without editing this file; each test is parametrized by address, so a failure names
the problem.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import traceback
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import torch
from helpers import Computed, selected_keys
from typer.testing import CliRunner

from solforge.cli import app
from solforge.cli.problems import first_sentence, shorten
from solforge.errors import ProblemError
from solforge.hardware import load_profile
from solforge.problem.check import check_problem
from solforge.problem.suite import address_of, bundled_problem_dirs, open_problem
from solforge.solar import analyze_workload

ADDRESSES = [address_of(folder) for folder in bundled_problem_dirs()]
# Problems whose analysis took more than five seconds on the 2-core CI machine (2026-12-01):
# MoE blocks, whole decoder layers, FP8 MoE GEMMs and paged attention with many pages.
SLOW_ANALYSES = {"l2/decoder_layer_qwen3_30b_a3b_prefill", "l2/moe_block_deepseek_v3",
                 "l2/moe_block_qwen3_235b_a22b", "l2/moe_block_qwen3_30b_a3b",
                 "quant/fp8_moe_gemm_block128_qwen3_30b_a3b_down",
                 "quant/fp8_moe_gemm_block128_deepseek_v3_gate_up", "fib/top_p_sampling_qwen3_8b",
                 "fib/gqa_paged_decode_llama3_1_8b_ps16", "fib/gqa_paged_decode_qwen3_30b_a3b_ps64",
                 "fib/gqa_paged_decode_llama3_1_8b_ps1", "fib/gqa_paged_decode_llama3_1_70b_ps16",
                 "fib/gqa_paged_decode_llama3_1_70b_ps64",
                 # about two seconds or more in the quick subset (2026-12-01); a problem of the
                 # same family stays in it
                 "fib/gqa_ragged_prefill_qwen3_30b_a3b", "l2/mixer_block_mamba2_2_7b",
                 "quant/nvfp4_gemm_llama3_1_70b_gate_up"}
ANALYSES = [pytest.param(address, marks=pytest.mark.slow) if address in SLOW_ANALYSES
            else address for address in ADDRESSES]
H200 = load_profile("H200")


@pytest.mark.parametrize("address", ADDRESSES)
def test_reference_runs_on_the_cpu(address):
    report = check_problem(address)
    assert report.outputs


@pytest.mark.parametrize("address", ADDRESSES)
def test_at_least_four_workloads_beyond_the_tiny_one(address):
    problem = open_problem(address)
    tiny = problem.smallest_workload()
    assert len([w for w in problem.workloads if w.uuid != tiny.uuid]) >= 4


def _analysis_of(address: str) -> list[tuple[str, tuple[str, ...], float]] | str:
    """Each workload's uuid, ops with no cost rule and T_SOL on the H200, in the problem's
    order; or the traceback of what the analysis raised. Run in a process of `analyses`, from
    the random state each test starts from (conftest.py)."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    try:
        problem = open_problem(address)
        analyses = [(w.uuid, analyze_workload(problem, w, H200)) for w in problem.workloads]
    except Exception:
        return traceback.format_exc()
    return [(uuid, a.unknown_ops, a.t_sol_ms) for uuid, a in analyses]


@pytest.fixture(scope="module")
def analyses(request) -> Computed:
    """The analyses the selected tests read, by address, made in two processes side by side:
    tracing a reference is mostly Python, about one core's work (the slowest problems 5 to 20 s
    each on the 2-core machine), so one process at a time left the other core mostly idle. The
    slow ones are handed out first, so that no process is left with one of them at the end."""
    def compute(addresses: list[str]) -> list:
        # Fresh interpreters (not forks of this one), of one torch thread each: two processes
        # of two threads would contend for the two cores.
        with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=torch.set_num_threads, initargs=(1,)) as pool:
            return list(pool.map(_analysis_of, addresses))

    wanted = selected_keys(request, "address")
    return Computed(compute).fetch(sorted(wanted, key=lambda a: a not in SLOW_ANALYSES))


@pytest.mark.parametrize("address", ANALYSES)
def test_analysis_costs_every_op_of_every_workload(address, analyses):
    analyzed = analyses[address]
    assert not isinstance(analyzed, str), analyzed  # the analysis raised: its traceback
    assert [uuid for uuid, _, _ in analyzed] == [w.uuid for w in open_problem(address).workloads]
    for uuid, unknown_ops, t_sol_ms in analyzed:
        assert unknown_ops == (), f"workload {uuid}"
        assert t_sol_ms > 0, f"workload {uuid}"


def test_workload_uuids_are_unique_across_the_suite():
    owners: dict[str, list[str]] = {}
    for address in ADDRESSES:
        for workload in open_problem(address).workloads:
            owners.setdefault(workload.uuid, []).append(address)
    assert {u: a for u, a in owners.items() if len(a) > 1} == {}


def list_rows(*options: str) -> list[dict]:
    result = CliRunner().invoke(app, ["problems", "list", "--json", *options])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines()]


def test_problems_list_has_one_row_per_bundled_problem():
    rows = list_rows()
    assert [r["address"] for r in rows] == ADDRESSES
    for row in rows:
        problem = open_problem(row["address"])
        assert row["error"] is None
        assert row["summary"], f"{row['address']} has no description"
        assert row["workloads"] == len(problem.workloads)
        assert row["var_axes"] == problem.definition.var_axes
        assert row["op_type"] == problem.definition.op_type
        assert problem.definition.description.startswith(row["summary"].removesuffix("..."))


def test_problems_list_filters_by_tier():
    tier = ADDRESSES[0].split("/")[0]
    rows = list_rows("--tier", tier)
    assert rows and all(r["address"].startswith(f"{tier}/") for r in rows)
    assert CliRunner().invoke(app, ["problems", "list", "--tier", "l9"]).exit_code == 2


def test_problems_list_table():
    result = CliRunner().invoke(app, ["problems", "list"])
    assert result.exit_code == 0
    assert f"{len(ADDRESSES)} bundled problems" in result.output


def test_first_sentence_is_cut_at_the_sentence_end_and_the_limit():
    assert first_sentence("RMSNorm of Llama-3.1-8B (eps=1e-5). Applied per token.") == (
        "RMSNorm of Llama-3.1-8B (eps=1e-5).")
    assert first_sentence("x" * 200) == "x" * 200  # whole: --json prints it
    assert shorten("x" * 200, limit=10) == "xxxxxxx..."  # the table cuts it
    assert shorten("Paged attention of Llama, decode", limit=20) == "Paged attention..."


def test_check_and_analyze_take_an_address():
    address = ADDRESSES[0]
    runner = CliRunner()
    check = runner.invoke(app, ["check", address])
    assert check.exit_code == 0 and "ok" in check.output
    analyze = runner.invoke(app, ["analyze", address, "--json"])
    assert analyze.exit_code == 0
    assert len(analyze.output.splitlines()) == len(open_problem(address).workloads)


def test_an_unknown_address_says_how_to_find_names():
    result = CliRunner().invoke(app, ["check", "l1/no_such_problem"])
    assert isinstance(result.exception, ProblemError)
    assert "solforge problems list" in str(result.exception)
