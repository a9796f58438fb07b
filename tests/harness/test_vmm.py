"""harness/vmm.py: arenas of memory the driver shares with its worker by file descriptor.

On the CPU the arenas are host memfds (`HostArena`), so the whole protocol runs here: the
descriptor crossing a Unix socket (to another process too), strided inputs, output slots
written back, arenas replaced when a role outgrows them. The CUDA allocation itself runs only
on a GPU (the `gpu` test); its ctypes layouts are checked against cuda.h where the header is."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solforge.harness import handover, vmm

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


@pytest.fixture
def ends():
    """The driver's arenas and the worker's mappings of them, over one socket pair."""
    driver, worker = vmm.socket_pair()
    shared = vmm.FdShared(CPU, driver)
    yield shared, vmm.FdMapped(worker, CPU, timeout_s=5)
    shared.close()
    driver.close()
    worker.close()


def test_shared_inputs_keep_their_values_and_strides_and_slots_carry_outputs_back(ends):
    shared, mapped = ends
    strided = torch.randn(300, 7)[:, 2:]  # a view with an offset and a row stride of 7
    expanded = torch.randn(3, 1).expand(3, 4)  # elements sharing memory: copied contiguous
    values, described = shared.share([strided, 1e-5, torch.arange(5, dtype=torch.int32),
                                      expanded])
    assert values[1] == 1e-5 and described[1] is None and described[0]["kind"] == vmm.KIND
    seen = [mapped.view(d) for d in (described[0], described[2], described[3])]
    assert seen[0].stride() == (7, 1) and torch.equal(seen[0], strided)
    assert torch.equal(seen[1], torch.arange(5, dtype=torch.int32))
    assert seen[2].stride() == (4, 1) and torch.equal(seen[2], expanded)
    slots, slot_described = shared.output_slots([((4, 3), torch.float16), None])
    assert slots[1] is None and slot_described[1] is None
    mapped.view(slot_described[0]).fill_(2.5)  # the worker writes its output in place
    assert torch.equal(handover.taken([0, 7], slots)[0], torch.full((4, 3), 2.5,
                                                                  dtype=torch.float16))


def test_a_role_that_outgrows_its_arena_gets_a_new_one_and_the_worker_drops_the_old(ends):
    shared, mapped = ends
    _, small = shared.share([torch.ones(16)])
    assert torch.equal(mapped.view(small[0]), torch.ones(16))
    first = small[0]["arena"]
    big = torch.arange(1 << 19, dtype=torch.float32)  # 2 MiB: more than the first arena
    _, large = shared.share([big])
    assert large[0]["arena"] != first and torch.equal(mapped.view(large[0]), big)
    assert first not in mapped.arenas and set(mapped.roles) == {"inputs"}
    _, again = shared.share([torch.zeros(8)])  # fits: the same arena, overwritten
    assert again[0]["arena"] == large[0]["arena"]


def test_a_description_past_its_arena_or_of_an_unknown_dtype_is_refused(ends):
    shared, mapped = ends
    _, described = shared.share([torch.ones(16)])
    size = mapped.view(described[0]) is not None and mapped.arenas[described[0]["arena"]].size
    with pytest.raises(ValueError, match="past the end"):
        mapped.view({**described[0], "shape": [size], "stride": [1]})
    with pytest.raises(ValueError, match="not a shared tensor"):
        mapped.view({**described[0], "dtype": "object"})
    mapped.timeout_s = 0.2
    with pytest.raises(TimeoutError):  # an arena the driver never sent
        mapped.view({**described[0], "arena": 99})


_WORKER = """
import json, sys, torch
from solforge.harness import vmm
mapped = vmm.FdMapped(vmm.adopt(int(sys.argv[1])), torch.device(sys.argv[2]), timeout_s=60)
described = json.loads(sys.stdin.readline())
inputs = mapped.view(described["inputs"])
mapped.view(described["slot"]).copy_(inputs.sum().reshape(1))
print(json.dumps(float(inputs.sum())), flush=True)
"""


def _across_processes(device: torch.device) -> None:
    """A second process maps the arenas from descriptors alone and writes the slot."""
    driver_link, worker_link = vmm.socket_pair()
    try:
        shared = vmm.FdShared(device, driver_link)
        original = torch.randn(1000, 3, device=device)
        _, described = shared.share([original])
        slots, slot_described = shared.output_slots([((1,), torch.float32)])
        slots[0].zero_()
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        message = json.dumps({"inputs": described[0], "slot": slot_described[0]})
        child = subprocess.run([sys.executable, "-c", _WORKER, str(worker_link.fileno()),
                                str(device)], input=message + "\n", capture_output=True,
                               text=True, env=env, timeout=120,
                               pass_fds=(worker_link.fileno(),))
        assert child.returncode == 0, child.stderr
        total = float(original.sum())
        assert json.loads(child.stdout) == pytest.approx(total, rel=1e-5)
        assert float(handover.taken([0], slots)[0]) == pytest.approx(total, rel=1e-5)
        shared.close()
    finally:
        driver_link.close()
        worker_link.close()


def test_another_process_maps_the_arenas_it_was_sent():
    _across_processes(CPU)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_another_process_maps_device_arenas_it_was_sent():
    _across_processes(torch.device("cuda"))


_LAYOUT = r"""
#include <cuda.h>
#include <stdio.h>
#include <stddef.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %d %d %d %d\n", sizeof(CUmemAllocationProp),
           offsetof(CUmemAllocationProp, location),
           offsetof(CUmemAllocationProp, win32HandleMetaData),
           offsetof(CUmemAllocationProp, allocFlags), sizeof(CUmemAccessDesc),
           offsetof(CUmemAccessDesc, flags), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
           CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE,
           CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    return 0;
}
"""


def _cuda_include() -> Path | None:
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include"
    return None


@pytest.mark.skipif(_cuda_include() is None or shutil.which("cc") is None,
                    reason="needs cuda.h and a C compiler")
def test_the_ctypes_layouts_match_cuda_h(tmp_path):
    source, program = tmp_path / "layout.c", tmp_path / "layout"
    source.write_text(_LAYOUT)
    subprocess.run(["cc", f"-I{_cuda_include()}", str(source), "-o", str(program)], check=True,
                   capture_output=True, timeout=120)
    found = [int(x) for x in subprocess.run([str(program)], capture_output=True, text=True,
                                            check=True).stdout.split()]
    prop, access = vmm._AllocationProp, vmm._AccessDesc
    assert found == [ctypes.sizeof(prop), prop.location.offset,
                     prop.win32HandleMetaData.offset, prop.allocFlags.offset,
                     ctypes.sizeof(access), access.flags.offset, vmm._POSIX_FD, vmm._PINNED,
                     vmm._ON_DEVICE, vmm._READ_WRITE]


def test_a_worker_gone_before_its_arena_arrives_is_a_lost_worker():
    from solforge.data.trace import Status
    from solforge.harness.judge import _worker_reachable
    from solforge.harness.session import WorkerLost

    driver_link, worker_link = vmm.socket_pair()
    worker_link.close()
    shared = vmm.FdShared(CPU, driver_link)
    with pytest.raises(WorkerLost) as lost, _worker_reachable():
        shared.share([torch.ones(4)])
    assert lost.value.status is Status.RUNTIME_ERROR
    driver_link.close()
