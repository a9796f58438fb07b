"""Triton kernels compiled ahead for a candidate (harness/sandbox/jit_ahead.py): kept as regular
files within bounds, named by the candidate's sources, and copied only into that candidate's
worker sandbox, never into a baseline's."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from solforge.data.solution import solution_from_python
from solforge.harness import protocol
from solforge.harness.sandbox import Sandbox, jit_ahead, policy_for
from solforge.harness.supervisor import Supervisor

SOURCE = "def run(x):\n    return x\n"


def _cache(folder: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    return folder


def test_the_folder_is_named_by_the_sources_only():
    first = solution_from_python(SOURCE, "a")
    renamed = solution_from_python(SOURCE, "b")
    changed = solution_from_python(SOURCE + "# another kernel\n", "a")
    assert jit_ahead.digest(first) == jit_ahead.digest(renamed)
    assert jit_ahead.digest(first) != jit_ahead.digest(changed)


def test_keep_takes_regular_files_only_and_replaces(tmp_path):
    solution = solution_from_python(SOURCE, "a")
    cache = _cache(tmp_path / "cache", {"H1/k.cubin": b"cubin", "H1/k.json": b"{}"})
    (tmp_path / "secret").write_text("driver's")
    (cache / "H1" / "link.json").symlink_to(tmp_path / "secret")
    (cache / "linked_folder").symlink_to(tmp_path)
    root = tmp_path / "ahead"
    assert jit_ahead.keep(cache, root, solution)
    kept = jit_ahead.folder(root, solution)
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*")) == [
        "H1", "H1/k.cubin", "H1/k.json"]
    assert not any(p.is_symlink() for p in kept.rglob("*"))

    again = _cache(tmp_path / "again", {"H2/k.cubin": b"other"})
    assert jit_ahead.keep(again, root, solution)
    assert [p.name for p in kept.rglob("*.cubin")] == ["k.cubin"]
    assert (kept / "H2" / "k.cubin").read_bytes() == b"other"
    assert not [p for p in root.iterdir() if p.name.startswith(".draft")]

    jit_ahead.discard(root, solution)
    assert not kept.exists()


def test_keep_refuses_empty_or_oversized_caches(tmp_path, monkeypatch):
    solution = solution_from_python(SOURCE, "a")
    root = tmp_path / "ahead"
    assert not jit_ahead.keep(tmp_path / "missing", root, solution)
    monkeypatch.setattr(jit_ahead, "MAX_BYTES", 8)
    cache = _cache(tmp_path / "cache", {"H1/k.cubin": b"0123456789"})
    assert not jit_ahead.keep(cache, root, solution)
    assert not jit_ahead.folder(root, solution).exists()


def test_the_sandbox_gets_a_private_copy_in_its_triton_cache(tmp_path):
    kernels = _cache(tmp_path / "kept", {"H1/k.cubin": b"cubin"})
    (kernels / "H1" / "link").symlink_to(tmp_path)
    sandbox = Sandbox(policy_for((str(tmp_path),)))
    try:
        sandbox.copy_in_triton(None)
        sandbox.copy_in_triton(tmp_path / "missing")
        triton_cache = sandbox.folder / "cache" / "triton"
        assert not triton_cache.exists()
        sandbox.copy_in_triton(kernels)
        copied = triton_cache / "H1" / "k.cubin"
        assert copied.read_bytes() == b"cubin"
        assert not (triton_cache / "H1" / "link").exists()
        env = sandbox.env(dict(os.environ))
        assert env["TRITON_CACHE_DIR"] == str(triton_cache)
        copied.write_bytes(b"planted")
    finally:
        sandbox.remove()
    assert (kernels / "H1" / "k.cubin").read_bytes() == b"cubin"


def test_only_the_candidate_role_gets_its_kernels(tmp_path):
    supervisor = Supervisor(tmp_path, torch.device("cpu"), None, "cpu", None, 0, tmp_path,
                            tmp_path / "ahead")
    solution = solution_from_python(SOURCE, "a")
    assert supervisor._ahead(protocol.CANDIDATE, solution) == jit_ahead.folder(
        tmp_path / "ahead", solution)
    assert supervisor._ahead(protocol.REFERENCE_COMPILE, solution) is None
    assert supervisor._ahead(protocol.CANDIDATE, None) is None
