"""The sandbox holds against a candidate with full Python in its worker (classes 1-3 of the
threat model in tests/exploits/README.md), as root and as an ordinary user.

Each test starts a real sandboxed interpreter (`python -I`, no torch: ~0.1 s) running
tests/exploits/sandbox_probes/attacks.py against this process, which plays the driver."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import site
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import solforge
from solforge.harness.process import python_command, python_env, start
from solforge.harness.sandbox import Sandbox, policy_for, protected_driver
from solforge.harness.sandbox.driver import dumpable, processes_of
from solforge.harness.sandbox.landlock import abi_version
from solforge.harness.sandbox.seccomp import filter_program

ATTACKS = Path(__file__).resolve().parents[1] / "exploits" / "sandbox_probes"
ROOT = os.geteuid() == 0


def run_attacks(tmp_path: Path, device_type: str = "cpu") -> tuple[dict[str, dict], Sandbox, str]:
    cache_file = tmp_path / "baselines.jsonl"
    cache_file.write_text("")
    policy = policy_for((str(ATTACKS),), device_type)
    sandbox = Sandbox(policy)
    tag = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"  # sleep's argument
    script = sandbox.copy_in(ATTACKS, [ATTACKS / "attacks.py"]) / "attacks.py"
    args = [str(os.getpid()), str(cache_file), str(Path(solforge.__file__).parent),
            site.getsitepackages()[0], tag]
    spec = sandbox.spec()
    argv = python_command(str(script), *args, sandbox=spec)
    with protected_driver():
        process = start(argv, sandbox.env(python_env(dict(os.environ))), Path(spec.cwd))
        out, _ = process.communicate(timeout=60)
    found = {}
    for line in out.decode().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            found[record["attack"]] = record
    assert "escape_daemon" in found, out.decode()[-2000:]
    return found, sandbox, tag


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def attacked(request, tmp_path_factory):
    """Both policies: "cuda" drops the PID namespace as root (CUDA IPC cannot cross it)."""
    found, sandbox, tag = run_attacks(tmp_path_factory.mktemp("driver"), request.param)
    yield found, sandbox, tag
    sandbox.remove()


@pytest.mark.parametrize("attack", ["read_memory", "rewrite_output", "ptrace",
                                    "append_baseline_cache", "write_solforge_sources",
                                    "write_site_pth", "write_solforge_module"])
def test_attack_is_blocked(attack, attacked):
    found, _, _ = attacked
    assert found[attack]["reached"] is False, found[attack]["detail"]


def test_driver_is_not_visible(attacked):
    found, sandbox, _ = attacked
    visible = found["visible_pids"]["detail"].split()
    if sandbox.policy.pid_namespace:
        assert str(os.getpid()) not in visible and "1" in visible


def test_worker_identity(attacked):
    found, sandbox, _ = attacked
    seen = json.loads(found["identity"]["detail"])
    status = dict(line.split(":", 1) for line in seen["status"].splitlines() if ":" in line)
    assert seen["flags"] == 1  # python -I
    assert seen["cwd"].startswith(str(sandbox.folder)) and seen["home"].startswith(
        str(sandbox.folder))
    assert status["NoNewPrivs"].strip() == "1"
    assert int(status["CapEff"], 16) == 0
    if sandbox.policy.seccomp:
        assert status["Seccomp"].strip() == "2"
    if ROOT and sandbox.policy.uid_switch:
        assert seen["uid"] == sandbox.uid and seen["groups"] == []


@pytest.mark.skipif(not ROOT, reason="the uid switch needs root")
def test_root_switches_uid_here():
    assert policy_for((str(ATTACKS),)).uid_switch, policy_for((str(ATTACKS),)).active["uid"]


def test_escaped_daemon_dies_with_the_sandbox(attacked):
    """The daemon outlived its starter (setsid, subreaper cleared); killing the sandbox ends it."""
    found, sandbox, tag = attacked
    assert found["escape_daemon"]["reached"], found["escape_daemon"]["detail"]

    def alive() -> list[str]:
        out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line.strip() == f"sleep {tag}"]

    if sandbox.policy.pid_namespace:  # process 1 exited: the kernel killed the rest
        deadline = time.monotonic() + 5
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    else:  # alive until the sandbox's kill finds it by its private uid
        assert alive() and sandbox.uid is not None and processes_of(sandbox.uid)
        sandbox.kill(subprocess.Popen(["true"]))
    assert alive() == []


def test_driver_is_not_dumpable_while_evaluating():
    before = dumpable()
    with protected_driver():
        assert not dumpable()
    assert dumpable() == before


def test_protections_are_recorded():
    active = policy_for((str(ATTACKS),)).active
    for name in ("uid", "pid_namespace", "landlock", "seccomp", "no_new_privs",
                 "driver_dumpable", "interpreter"):
        assert name in active
    if abi_version() == 0:
        assert active["landlock"].startswith("unavailable")


def test_seccomp_program_covers_both_architectures():
    for machine in ("x86_64", "aarch64"):
        program = filter_program(machine)
        assert len(program) % 8 == 0 and len(program) > 40


def test_sandbox_off_is_recorded(monkeypatch):
    monkeypatch.setenv("SOLFORGE_SANDBOX", "off")
    policy = policy_for(("/",))
    assert not policy.enabled and policy.active["sandbox"].startswith("off")


def test_worker_command_is_isolated():
    spec = Sandbox(policy_for(("/",)))
    try:
        argv = python_command("solforge.harness.worker", "3", "4", sandbox=spec.spec())
    finally:
        spec.remove()
    assert argv[0] == sys.executable and argv[1] == "-I"
    assert argv[-3:] == ["solforge.harness.worker", "3", "4"]


@pytest.mark.slow
def test_cost_benchmark_runs(tmp_path):
    """benchmarks/sandbox_cost.py in its quick mode writes its JSON (kept working on the CPU)."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sandbox_cost.py"
    out = tmp_path / "cost.json"
    env = python_env(dict(os.environ))
    subprocess.run([sys.executable, str(script), str(out), "--repeats", "1"], check=True,
                   env=env, capture_output=True, timeout=120)
    found = json.loads(out.read_text())
    assert found["per_candidate"]["sandboxed_ready_s"] > 0 and "uid" in found["protections"]


def test_build_step_writes_only_its_output(tmp_path):
    """The compile step's sandbox: its output folder is writable, the sources' folder (the
    driver's cache) is not; afterwards the output belongs to the driver again."""
    from solforge.harness.process import run_module_sandboxed

    folder = tmp_path / "builds" / "solution"
    folder.mkdir(parents=True)
    script = folder / "fake_compiler.py"
    script.write_text(
        "import sys\nfrom pathlib import Path\n"
        "Path(sys.argv[1], 'out.so').write_text('library')\n"
        "try:\n    Path(sys.argv[2], 'planted.py').write_text('x')\n    print('PLANTED')\n"
        "except OSError as error:\n    print('refused', error)\n")
    os.chmod(tmp_path, 0o755)
    finished = run_module_sandboxed(str(script), [str(folder / "build"), str(tmp_path)], 60,
                                    python_env(dict(os.environ)), folder, folder / "build")
    assert finished.returncode == 0, finished.log
    assert "refused" in finished.log and not (tmp_path / "planted.py").exists()
    built = folder / "build" / "out.so"
    assert built.read_text() == "library" and built.stat().st_uid == os.getuid()


@pytest.mark.slow
def test_trace_records_the_protections(tmp_path):
    """An honest solution passes in the sandbox, and its trace says what isolated it."""
    from harness_corpus import HONEST, PROBLEMS, short_limits

    from solforge.data.solution import load_solution
    from solforge.data.trace import Status, Trace
    from solforge.harness.evaluate import EvalConfig, evaluate
    from solforge.problem import load_problem

    problem = load_problem(PROBLEMS / "rmsnorm_small")
    solution = load_solution(HONEST / "pytorch_rmsnorm" / "solution.py", problem.name)
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, limits=short_limits(),
                        cache_dir=tmp_path)
    (trace,) = evaluate(problem, solution, config)
    assert trace.evaluation.status is Status.PASSED, trace.evaluation.log
    recorded = Trace.from_dict(trace.to_dict()).evaluation.environment.sandbox
    assert recorded == policy_for((str(problem.root.resolve()),), "cpu").active


@pytest.mark.parametrize("number", [signal.SIGSEGV, signal.SIGKILL])
def test_launcher_dies_as_its_worker_did(number, tmp_path):
    """The driver sees the worker's own death (a crash is a crash), through the launcher."""
    source = (f"import os\nos.kill(os.getpid(), {int(number)})\n"
              "import ctypes\nctypes.string_at(0)\n")  # process 1 ignores its own kill
    with _sandboxed_script(tmp_path, source) as (sandbox, process):
        process.communicate(timeout=60)
    expected = {-int(number)} if not sandbox.policy.pid_namespace else {-int(number),
                                                                        -int(signal.SIGSEGV)}
    assert process.returncode in expected


def test_worker_killed_from_outside_reads_as_killed(tmp_path):
    """SIGKILL to the namespace's process 1 (the driver's kill): the launcher dies by SIGKILL too,
    with nothing printed."""
    from solforge.harness.sandbox.driver import children

    source = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    with _sandboxed_script(tmp_path, source) as (sandbox, process):
        assert process.stdout.readline().strip() == b"ready"
        worker = children(process.pid)[0] if sandbox.policy.pid_namespace else process.pid
        os.kill(worker, signal.SIGKILL)
        rest, _ = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL and rest == b""


@contextlib.contextmanager
def _sandboxed_script(folder: Path, source: str):
    """(sandbox, process): a Python script with `source` started in a fresh sandbox over
    `folder`, the sandbox removed afterwards."""
    script = folder / "script.py"
    script.write_text(source)
    os.chmod(folder, 0o755)
    sandbox = Sandbox(policy_for((str(folder),)))
    try:
        spec = sandbox.spec()
        yield sandbox, start(python_command(str(script), sandbox=spec),
                             sandbox.env(python_env(dict(os.environ))), Path(spec.cwd))
    finally:
        sandbox.remove()


def test_program_in_the_build_sandbox_writes_only_its_output(tmp_path):
    """A program (nvcc's place) keeps the restrictions through exec."""
    from solforge.harness.process import run_program_sandboxed

    folder = tmp_path / "solution"
    folder.mkdir()
    os.chmod(tmp_path, 0o755)
    command = ["sh", "-c", f"echo built > {folder}/kernel.o; echo x > {tmp_path}/planted; "
                           "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status"]
    finished = run_program_sandboxed(command, 60, dict(os.environ), folder, folder)
    assert (folder / "kernel.o").read_text() == "built\n"
    assert not (tmp_path / "planted").exists() and "NoNewPrivs:\t1" in finished.log


def test_warm_cache_is_a_copy_nothing_flows_back(tmp_path):
    """Each sandbox's JIT caches start as a copy of the driver's template; what the sandboxed
    process writes there stays in its own copy."""
    template = tmp_path / "template"
    (template / "inductor").mkdir(parents=True)
    (template / "inductor" / "probe.so").write_text("trusted")
    os.chmod(tmp_path, 0o755)
    sandbox = Sandbox(policy_for((str(tmp_path),)), warm_cache=template)
    try:
        copied = sandbox.folder / "cache" / "inductor" / "probe.so"
        assert copied.read_text() == "trusted"
        spec = sandbox.spec()
        command = ["sh", "-c", f"echo planted > {copied}; echo planted > {template}/x"]
        process = start(launcher_exec(spec, command), dict(os.environ), Path(spec.cwd))
        process.communicate(timeout=30)
        assert copied.read_text() == "planted\n"
    finally:
        sandbox.remove()
    assert (template / "inductor" / "probe.so").read_text() == "trusted"
    assert not (template / "x").exists()


def test_precompiled_headers_are_a_copy(tmp_path):
    """A worker that compiles gets the template's precompiled headers in its own TMPDIR; what
    it writes there stays in its copy."""
    headers = tmp_path / "tmp"
    (headers / "torchinductor_x" / "precompiled_headers").mkdir(parents=True)
    header = headers / "torchinductor_x" / "precompiled_headers" / "h.h.gch"
    header.write_text("trusted")
    sandbox = Sandbox(policy_for((str(tmp_path),)))
    try:
        sandbox.copy_in_headers(None)
        assert not any((sandbox.folder / "tmp").iterdir())
        sandbox.copy_in_headers(headers)
        copied = sandbox.folder / "tmp" / header.relative_to(headers)
        assert copied.read_text() == "trusted"
        copied.write_text("planted")
    finally:
        sandbox.remove()
    assert header.read_text() == "trusted"


def launcher_exec(spec, command: list[str]) -> list[str]:
    from solforge.harness.sandbox import launcher

    return launcher.command([spec.to_json(), "--exec", *command])


def test_library_workspaces_are_the_sandboxs_own():
    """Where the driver points FlashInfer at a shared workspace, a worker gets its own (its
    import writes a log there): none of the JIT caches a candidate writes is another's."""
    sandbox = Sandbox(policy_for((str(ATTACKS),), "cpu"))
    try:
        env = sandbox.env({"FLASHINFER_WORKSPACE_BASE": "/shared/fi_ws",
                           "TRITON_CACHE_DIR": "/shared/triton", "PATH": "/usr/bin"})
        for name in ("FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR", "HOME"):
            assert Path(env[name]).is_relative_to(sandbox.folder), (name, env[name])
        assert env["PATH"] == "/usr/bin"
    finally:
        sandbox.remove()
