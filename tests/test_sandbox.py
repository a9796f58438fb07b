"""The sandbox holds against a candidate with full Python in its worker (classes 1-3 of the
threat model in tests/exploits/README.md), as root and as an ordinary user.

Each test starts a real sandboxed interpreter (`python -I`, no torch: ~0.1 s) running
tests/exploits/sandbox_probes/attacks.py against this process, which plays the driver."""

from __future__ import annotations

import json
import os
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

ATTACKS = Path(__file__).resolve().parent / "exploits" / "sandbox_probes"
ROOT = os.geteuid() == 0


def run_attacks(tmp_path: Path) -> tuple[dict[str, dict], Sandbox, str]:
    cache_file = tmp_path / "baselines.jsonl"
    cache_file.write_text("")
    policy = policy_for((str(ATTACKS),))
    sandbox = Sandbox(policy)
    tag = f"solforge-escaped-{uuid.uuid4().hex[:8]}"
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


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    found, sandbox, tag = run_attacks(tmp_path_factory.mktemp("driver"))
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
    _, sandbox, tag = attacked

    def alive() -> list[str]:
        out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if tag in line]

    # The launcher exited with its child (namespace process 1), so the kernel killed the rest;
    # without a namespace, the private uid's processes are killed by the sandbox's kill.
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not sandbox.policy.pid_namespace and sandbox.uid is not None:
        assert processes_of(sandbox.uid)  # the daemon, until killed below
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


def test_cost_benchmark_runs(tmp_path):
    """benchmarks/sandbox_cost.py in its quick mode writes its JSON (kept working on the CPU)."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "sandbox_cost.py"
    out = tmp_path / "cost.json"
    env = python_env(dict(os.environ))
    subprocess.run([sys.executable, str(script), str(out), "--repeats", "1"], check=True,
                   env=env, capture_output=True, timeout=120)
    found = json.loads(out.read_text())
    assert found["per_candidate"]["sandboxed_ready_s"] > 0 and "uid" in found["protections"]
