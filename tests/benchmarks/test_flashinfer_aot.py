"""benchmarks/flashinfer_aot.py: the modules it builds on the CPU machine and the archive the
flashinfer stage installs (its building needs FlashInfer and nvcc: carry_flashinfer_aot.sh)."""

from __future__ import annotations

import json
import tarfile

from helpers import benchmark_script


def test_the_modules_are_those_the_gpus_built_for_the_library_baselines():
    """The H200's four and the H100's RMSNorm, each once."""
    script = benchmark_script("flashinfer_aot")
    names = script.wanted_modules(script.RECORDS)
    assert {"norm", "rope", "sampling"} <= set(names) and len(names) == 5
    assert sum(name.startswith("batch_prefill_with_kv_cache_") for name in names) == 2
    assert script.wanted_modules([*script.RECORDS, script.RECORDS[0]]) == names


def test_the_archive_holds_each_library_in_its_aot_folder_and_the_manifest(tmp_path):
    script = benchmark_script("flashinfer_aot")
    libraries = {}
    for name in ("rope", "sampling"):
        libraries[name] = tmp_path / "ws" / name / f"{name}.so"
        libraries[name].parent.mkdir(parents=True)
        libraries[name].write_bytes(name.encode())
    archive = tmp_path / "out" / "flashinfer-aot.tar.xz"
    script.pack(archive, libraries, {"flashinfer": "0.7.4", "modules": sorted(libraries)})
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == [script.MANIFEST, "rope/rope.so", "sampling/sampling.so"]
        assert json.load(tar.extractfile(script.MANIFEST))["flashinfer"] == "0.7.4"
        assert tar.extractfile("sampling/sampling.so").read() == b"sampling"
