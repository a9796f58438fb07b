"""`benchmarks/run_gpu_checks.sh`: its resumable stages go on from the stores committed under
benchmarks/results, so a fresh GPU machine continues instead of starting over."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "run_gpu_checks.sh"


def _stage(tmp_path: Path, stage: str, **env: str) -> tuple[str, object, list[str]]:
    """Run one stage with a stand-in interpreter that records the output file it was given
    (`-o FILE`) and that file's content when the script called it, and every command line;
    returns the three."""
    record, calls = tmp_path / "seen.txt", tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text('#!/usr/bin/env bash\necho "$*" >> "$CALLS"\nwhile [ $# -gt 0 ]; do\n'
                      '  if [ "$1" = -o ]; then\n    echo "$2" > "$SEEN"; cat "$2" >> "$SEEN"\n'
                      '  fi; shift\ndone\n')
    python.chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if k != "EXAMPLES_AGAIN"}, "EXAMPLES": "x",
           "PYTHON": str(python), "SEEN": str(record), "CALLS": str(calls), **env}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), stage], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    path, _, content = record.read_text().partition("\n")
    return path, json.loads(content), calls.read_text().splitlines()


def test_the_libraries_stage_judges_the_problems_it_is_given_in_their_order(tmp_path):
    """LIBRARY_PROBLEMS: the problems left on a GPU, first, without the suite's order ahead."""
    *_, calls = _stage(tmp_path, "libraries", LIBRARY_PROBLEMS="fib/b l1/a")
    (judged,) = [c for c in calls if "library_baselines_gpu.py" in c]
    assert judged.endswith(" fib/b l1/a")
    (tmp_path / "all").mkdir()
    *_, calls = _stage(tmp_path / "all", "libraries")
    (judged,) = [c for c in calls if "library_baselines_gpu.py" in c]
    assert "fib/" not in judged and "l1/" not in judged  # every problem, the script's default


def _calls(tmp_path: Path, out: Path, stage: str, **env: str) -> list[str]:
    """Run one stage into `out` with a stand-in interpreter that only records its command
    lines (appended over runs), and return them all."""
    python, calls = tmp_path / "python", tmp_path / "calls.txt"
    python.write_text('#!/usr/bin/env bash\necho "$*" >> "$CALLS"\n')
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "CALLS": str(calls), **env}
    done = subprocess.run(["bash", str(SCRIPT), str(out), stage], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return calls.read_text().splitlines()


@pytest.mark.parametrize(("stage", "committed", "name"), [
    ("examples", "h200-examples.json", "examples.json"),
    ("libraries", "h200-library-baselines.json", "library-baselines.json"),
])
def test_a_resumable_stage_starts_from_the_committed_store(tmp_path, stage, committed, name):
    path, content, calls = _stage(tmp_path, stage)
    assert path == str(tmp_path / "out" / name)
    assert content == json.loads((REPO / "benchmarks/results" / committed).read_text())
    # the committed baselines go in first and the store comes out after, for the next machine
    assert calls[0] == "-m solforge baselines import benchmarks/results/h200-baselines.json"
    assert calls[-1] == f"-m solforge baselines export {tmp_path / 'out' / 'h200-baselines.json'}"


def test_a_store_already_in_the_output_folder_is_kept(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "examples.json").write_text('{"examples": []}')
    assert _stage(tmp_path, "examples")[1] == {"examples": []}


def test_examples_again_is_passed_on(tmp_path):
    calls = _stage(tmp_path, "examples", EXAMPLES_AGAIN="cute_dsl cutile")[2]
    (script,) = [c for c in calls if "examples_gpu.py" in c]
    assert script.endswith("--again cute_dsl --again cutile")


@pytest.mark.parametrize(("stage", "variable", "store", "script", "packed"), [
    ("suite", "SUITE_STORE", "suite.db", "suite_gpu.py", "h200-suite.db.gz"),
    ("forge", "FORGE_STORE", "forge.db", "forge_gpu.py", "h200-forge.db.gz"),
    ("suitewarm", "WARM_STORE", "suite.db", "suite_gpu.py --name h200-warm",
     "h200-warm-suite.db.gz"),
])
def test_a_long_stage_goes_on_from_the_committed_store_and_leaves_the_next_one(
        tmp_path, stage, variable, store, script, packed):
    """The suite's and the search's SQLite stores travel gzipped: unpacked before the run,
    packed after, for the next machine to go on from."""
    committed = tmp_path / "committed.db.gz"
    committed.write_bytes(gzip.compress(b"stored traces"))
    out = tmp_path / "out"
    lines = _calls(tmp_path, out, stage, **{variable: str(committed)})
    assert (out / stage / store).read_bytes() == b"stored traces"
    assert gzip.decompress((out / stage / packed).read_bytes()) == b"stored traces"
    assert [i for i, c in enumerate(lines) if script in c] == [1], lines
    assert lines[0].startswith("-m solforge baselines import")
    assert lines[2].startswith("-m solforge baselines export")


@pytest.mark.parametrize(("shares", "names", "gpu"), [
    (None, [1, 3], None), ("2", [2], None), ("1", [1], "NVIDIA H100 80GB HBM3")])
def test_the_sharing_stage_searches_at_each_share_then_checks_the_times_agree(
        tmp_path, shares, names, gpu):
    """Its records are named by the GPU's model (h200 where nvidia-smi cannot say)."""
    env, tag = {}, "h200"
    if gpu is not None:
        (tmp_path / "bin").mkdir()
        smi = tmp_path / "bin" / "nvidia-smi"
        smi.write_text(f'#!/usr/bin/env bash\necho "{gpu}"\n')
        smi.chmod(0o755)
        env["PATH"] = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
        tag = "h100"
    if shares is not None:
        env["SHARE_PER_GPU"] = shares
    out = tmp_path / "out"
    lines = _calls(tmp_path, out, "sharing", **env)
    searches = [c for c in lines if "throughput_gpu.py" in c]
    assert [c.split("--per-gpu ")[1].split()[0] for c in searches] == [str(n) for n in names]
    for n, line in zip(names, searches):
        assert f"--name {tag}-share{n} " in line and "--before 0 --suite-sample 0" in line
        imported = "".join(lines[:lines.index(line)])
        # this GPU's committed baselines (never another's), so the search starts warm
        assert (f"baselines import benchmarks/results/{tag}-baselines.json --cache-dir "
                f"{out}/sharing/{tag}-share{n}-throughput-state/cache") in imported
        if tag == "h100":
            assert "h200-" not in imported
    assert "sharing_fidelity.py" in lines[-1] and "--per-gpu 3" in lines[-1]
    assert f"--name {tag} " in lines[-1]


def _on_an_h100(tmp_path: Path) -> dict[str, str]:
    """The environment of a call whose nvidia-smi names an H100, with a stand-in interpreter
    that records its command lines in tmp_path/calls.txt."""
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text('#!/usr/bin/env bash\necho "NVIDIA H100 80GB HBM3"\n')
    smi.chmod(0o755)
    python, calls = tmp_path / "python", tmp_path / "calls.txt"
    python.write_text('#!/usr/bin/env bash\necho "$*" >> "$CALLS"\n')
    python.chmod(0o755)
    calls.write_text("")
    return {**os.environ, "PYTHON": str(python), "CALLS": str(calls),
            "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}


@pytest.mark.parametrize("any_gpu", [None, "1"])
def test_the_h200s_stages_skip_another_gpu_unless_told(tmp_path, any_gpu):
    """A call that names no machine kind can get an H100: the stages that go on from and write
    the H200's stores (h200-*) skip it, unless ANY_GPU=1, and then they go on from and write
    the H100's own (h100-*), with its own launch floor; the others run."""
    env = _on_an_h100(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "launch-floor.json").write_text("{}")  # the floor stage's, in the same OUTDIR
    if any_gpu is not None:
        env["ANY_GPU"] = any_gpu
    done = subprocess.run(["bash", str(SCRIPT), str(out), "suitewarm", "timer", "compare",
                           "guards"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "calls.txt").read_text()
    assert "timer_cost.py" in lines and "compare_cost.py" in lines and "guard_cost.py" in lines
    assert ("suite_gpu.py" in lines) == (any_gpu == "1")
    assert ("suitewarm: skipped on this h100" in done.stdout) == (any_gpu is None)
    assert "h200-" not in lines  # nothing of the H200's read, written or named
    if any_gpu == "1":
        assert f"--name h100-warm {out}/suitewarm all --launch-floor {out}/launch-floor.json" \
            in lines
        assert f"baselines export {out}/h100-baselines.json" in lines


def test_on_another_gpu_a_suite_without_its_launch_floor_and_hgemm_stay_skipped(tmp_path):
    """ANY_GPU=1 does not run a suite against the H200's launch floor, nor tune into the
    H200's HGEMM table; libraries go on from the H100's own record."""
    env = {**_on_an_h100(tmp_path), "ANY_GPU": "1"}
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), str(out), "suite", "hgemm", "libraries"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "calls.txt").read_text()
    assert "suite: no launch floor of this h100" in done.stdout
    assert "hgemm: skipped on this h100" in done.stdout
    assert "suite_gpu.py" not in lines and "hgemm_gpu.py" not in lines
    assert "library_baselines_gpu.py" in lines and "h200-" not in lines
    seeded = json.loads((out / "library-baselines.json").read_text())
    assert seeded == json.loads((REPO / "benchmarks/results/h100-library-baselines.json")
                                .read_text())
    assert seeded["machine"]["gpu"].startswith("NVIDIA H100")  # nothing of the H200's seeded


def _flashinfer_stage(tmp_path: Path, stage: str, site: Path, *more: str,
                      **env: str) -> tuple[Path, list[str]]:
    """Run stages with a stand-in interpreter that logs each command line and the PYTHONPATH
    and PATH it saw (and sleeps SLEEP seconds); nothing to unpack (FI_CARRY an empty
    folder)."""
    python, calls = tmp_path / "python", tmp_path / "calls.txt"
    python.write_text('#!/usr/bin/env bash\n'
                      'echo "$* PYTHONPATH=$PYTHONPATH PATH=$PATH" >> "$CALLS"\n'
                      'sleep "${SLEEP:-0}"\n')
    python.chmod(0o755)
    (tmp_path / "wheels").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHON": str(python), "CALLS": str(calls), "FI_SITE": str(site),
           "FI_CARRY": str(tmp_path / "wheels"), **env}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), stage, *more], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "out", calls.read_text().splitlines() if calls.exists() else []


def test_the_flashinfer_stage_without_its_carry_says_how_to_make_it(tmp_path):
    out, calls = _flashinfer_stage(tmp_path, "flashinfer", tmp_path / "site")
    assert "carry_flashinfer.sh" in (out / "flashinfer.log").read_text()
    assert calls == [] and not (out / "flashinfer-setup.json").exists()  # tried again next call


def test_flashinfer_installed_on_the_machine_is_built_and_used_by_the_libraries(tmp_path):
    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "bin").mkdir()  # the ninja wheel's executable, which FlashInfer's JIT runs
    _, calls = _flashinfer_stage(tmp_path, "flashinfer", site)
    (setup,) = [c for c in calls if "flashinfer_setup.py" in c]
    assert f"-o {tmp_path / 'out' / 'flashinfer-setup.json'}" in setup
    # the problems recorded already need no module built (LIBRARIES_AGAIN: all of them)
    assert "--skip-recorded benchmarks/results/h200-library-baselines.json" in setup
    assert f"PYTHONPATH={site}:" in setup  # found first, before the checkout's src/
    assert f" PATH={site / 'bin'}:" in setup
    _, calls = _flashinfer_stage(tmp_path, "libraries", site)
    (judged,) = [c for c in calls if "library_baselines_gpu.py" in c]
    assert f"PYTHONPATH={site}:" in judged


def test_the_carried_flashinfer_is_unpacked_into_its_site(tmp_path):
    """carry_flashinfer.sh's archive (an installed site folder, xz-packed) lands in FI_SITE,
    and the setup then runs from it."""
    import tarfile

    packed = tmp_path / "packed"
    (packed / "flashinfer").mkdir(parents=True)
    (packed / "flashinfer" / "__init__.py").write_text("__version__ = 'x'\n")
    (tmp_path / "wheels").mkdir()
    with tarfile.open(tmp_path / "wheels" / "flashinfer-site.tar.xz", "w:xz") as archive:
        archive.add(packed, arcname=".")
    site = tmp_path / "site"
    _, calls = _flashinfer_stage(tmp_path, "flashinfer", site)
    assert (site / "flashinfer" / "__init__.py").is_file()
    assert any("flashinfer_setup.py" in call and f"PYTHONPATH={site}:" in call for call in calls)


def _prebuilt_archive(folder: Path, version: str, *modules: str) -> None:
    """carry_flashinfer_aot.sh's archive: each module's library beside the manifest."""
    import io
    import tarfile

    folder.mkdir(exist_ok=True)
    with tarfile.open(folder / "flashinfer-aot.tar.xz", "w:xz") as archive:
        files = {"flashinfer-aot.json": json.dumps({"flashinfer": version, "modules": modules}),
                 **{f"{name}/{name}.so": "ELF" for name in modules}}
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text.encode()))


def _site_with_flashinfer(site: Path, version: str) -> Path:
    (site / "flashinfer").mkdir(parents=True)
    (site / f"flashinfer_python-{version}.dist-info").mkdir()
    return site / "flashinfer" / "data" / "aot"


def test_modules_compiled_on_the_cpu_machine_are_installed_ahead_of_time_once(tmp_path):
    """Installed before the setup runs, so it finds them built; a second call leaves them."""
    aot = _site_with_flashinfer(tmp_path / "site", "0.7.4")
    _prebuilt_archive(tmp_path / "wheels", "0.7.4", "rope", "sampling")
    out, calls = _flashinfer_stage(tmp_path, "flashinfer", tmp_path / "site")
    assert (aot / "rope" / "rope.so").read_text() == "ELF"
    assert (aot / "sampling" / "sampling.so").is_file()
    assert "installed ahead of time from" in (out / "flashinfer.log").read_text()
    assert "rope sampling" in (out / "flashinfer.log").read_text()
    assert any("flashinfer_setup.py" in call for call in calls)
    (aot / "rope" / "rope.so").write_text("built on the H200")
    out, _ = _flashinfer_stage(tmp_path, "flashinfer", tmp_path / "site")
    assert (aot / "rope" / "rope.so").read_text() == "built on the H200"


def test_modules_compiled_for_another_flashinfer_are_left_out(tmp_path):
    aot = _site_with_flashinfer(tmp_path / "site", "0.7.4")
    _prebuilt_archive(tmp_path / "wheels", "0.6.0", "rope")
    out, calls = _flashinfer_stage(tmp_path, "flashinfer", tmp_path / "site")
    assert not aot.exists()
    assert "built for FlashInfer 0.6.0, the site has 0.7.4" in (out / "flashinfer.log").read_text()
    assert any("flashinfer_setup.py" in call for call in calls)  # it builds them itself


def test_the_flashinfer_stage_goes_on_and_the_libraries_wait_for_its_modules(tmp_path):
    """The setup resumes from its own record, so the stage runs again while one exists, and
    the libraries stage is told which modules it holds."""
    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "flashinfer-setup.json").write_text('{"problems": {}}')
    _, calls = _flashinfer_stage(tmp_path, "flashinfer", site, "libraries")
    (setup,) = [c for c in calls if "flashinfer_setup.py" in c]
    assert "--deadline-s " in setup
    (judged,) = [c for c in calls if "library_baselines_gpu.py" in c]
    assert f"--flashinfer-setup {out / 'flashinfer-setup.json'}" in judged


def test_deadline_s_is_the_whole_calls(tmp_path):
    """Each stage gets what the stages before it left of DEADLINE_S, and one left less than
    MIN_STAGE_S is not started: the call ends within its limit, the next call runs it."""
    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    _, calls = _flashinfer_stage(tmp_path, "flashinfer", site, "libraries", "launch",
                                 SLEEP="2", DEADLINE_S="7", MIN_STAGE_S="3")
    (setup,) = [c for c in calls if "flashinfer_setup.py" in c]
    given = int(setup.split("--deadline-s ")[1].split()[0])
    assert given >= 5  # 7 s less the script's own start
    (judged,) = [c for c in calls if "library_baselines_gpu.py" in c]
    assert int(judged.split("--deadline-s ")[1].split()[0]) <= given - 2
    assert not any("hgemm_launch_host.py" in c for c in calls)  # 7 s gone by then


def test_forge_again_is_passed_on_to_a_search_not_a_composition(tmp_path):
    for compose in ("0", "1"):
        lines = _calls(tmp_path, tmp_path / f"out{compose}", "forge",
                       FORGE_AGAIN="gelu geglu", FORGE_COMPOSE=compose)
    search, composition = [c for c in lines if "forge_gpu.py" in c]
    assert search.endswith("--again gelu geglu")
    assert "--again" not in composition and composition.endswith("--compose")


@pytest.mark.parametrize(("given", "expected"), [
    (None, "--largest 1"),
    ("--largest 2 --smallest 2 l2/swiglu_mlp_llama3_1_8b=swiglu_mlp",
     "--largest 2 --smallest 2 l2/swiglu_mlp_llama3_1_8b=swiglu_mlp")])
def test_the_variants_stage_takes_its_arguments_from_variants_args(tmp_path, given, expected):
    out = tmp_path / "out"
    env = {} if given is None else {"VARIANTS_ARGS": given}
    (line,) = _calls(tmp_path, out, "variants", **env)
    assert line == f"benchmarks/variants_gpu.py -o {out}/variants.json {expected}"


def test_the_tests_stage_goes_on_from_the_ledger_and_leaves_it_for_the_next_call(tmp_path):
    """The `gpu`-marked tests outlast one call: they run with the ledger copied in (from
    GPU_TESTS_LEDGER, default the committed one), stop before the call's deadline, and the
    ledger in OUTDIR is the one a second call in the same folder goes on with."""
    committed, out = tmp_path / "committed.jsonl", tmp_path / "out"
    committed.write_text('{"code": "c", "node": "t", "outcome": "passed"}\n')
    python, calls = tmp_path / "python", tmp_path / "calls.txt"
    python.write_text('#!/usr/bin/env bash\necho "ledger=${SOLFORGE_TESTS_LEDGER:-} $*" >> '
                      '"$CALLS"\n')
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "CALLS": str(calls),
           "GPU_TESTS_LEDGER": str(committed)}
    for _ in range(2):
        done = subprocess.run(["bash", str(SCRIPT), str(out), "tests"], env=env,
                              capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 0, done.stdout + done.stderr
        (out / "h200-gpu-tests.jsonl").open("a").write("a later outcome\n")
    ledger = out / "h200-gpu-tests.jsonl"
    assert ledger.read_text().splitlines()[1:] == ["a later outcome", "a later outcome"]
    first, summary = calls.read_text().splitlines()[:2]
    assert first.startswith(f"ledger={ledger} -m pytest -m gpu ")
    assert "faulthandler_timeout=300" in first
    assert summary == f"ledger= tests/ledger.py {ledger}"


@pytest.mark.parametrize(("env", "per_gpu", "candidates"), [
    ({}, "6", "60"), ({"THROUGHPUT_PER_GPU": "3", "THROUGHPUT_CANDIDATES": "24"}, "3", "24"),
])
def test_the_throughput_stage_searches_with_six_units_unless_told(tmp_path, env, per_gpu,
                                                                  candidates):
    """Issue 13's record is made with the units a GPU that gave the best rate (six, with
    racing, on an H100), from this GPU's committed state and baselines."""
    out = tmp_path / "out"
    lines = _calls(tmp_path, out, "throughput", **env)
    [search] = [line for line in lines if "throughput_gpu.py" in line]
    assert f"--per-gpu {per_gpu} --candidates {candidates}" in search
    assert search.startswith(f"benchmarks/throughput_gpu.py {out}/throughput --name h200 ")
    assert (f"baselines import benchmarks/results/h200-baselines.json --cache-dir "
            f"{out}/throughput/h200-throughput-state/cache") in "".join(lines)
