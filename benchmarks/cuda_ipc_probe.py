"""Which CUDA IPC directions work between processes of different users (run as root on a GPU).

    python benchmarks/cuda_ipc_probe.py [-o OUT.jsonl]

The harness's worker runs under a private uid (harness/sandbox): can it map the driver's device
memory through CUDA IPC (handover.py), or the driver its? Six scenarios, each an exporter that
shares a 1024-element tensor through PyTorch's CUDA IPC and an importer that maps it, sums it
and overwrites it: root to root, with the exporter non-dumpable (as the driver is), and across
uid 65534 in both directions. One JSON line per scenario. The H200's answer (2026-12-01): only
same-uid pairs work; across uids the import fails with cudaErrorMapBufferObjectFailed, which is
why frames carry tensors through shared host memory there (area.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_EXPORT = r"""
import ctypes, json, sys, torch
if json.loads(sys.argv[1]).get("nodump"):
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
shared = torch.arange(1024, dtype=torch.int64, device="cuda")
torch.cuda.synchronize()
d = shared.untyped_storage()._share_cuda_()
print(json.dumps([d[0], d[1].hex(), d[2], d[3], d[4].hex() if d[4] else None, d[5],
                  d[6].hex() if d[6] else None, d[7]]), flush=True)
sys.stdin.readline()
print(int(shared.sum()), flush=True)
"""

_IMPORT = r"""
import ctypes, json, os, sys, torch
if json.loads(sys.argv[1]).get("nodump"):
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
d = json.loads(sys.argv[2])
torch.cuda.init()
try:
    storage = torch.UntypedStorage._new_shared_cuda(
        d[0], bytes.fromhex(d[1]), d[2], d[3], bytes.fromhex(d[4]) if d[4] else None, d[5],
        bytes.fromhex(d[6]) if d[6] else None, d[7])
    mapped = torch.empty(0, dtype=torch.int64, device="cuda")
    mapped.set_(storage, 0, (1024,), (1,))
    total = int(mapped.sum())
    mapped.fill_(1)
    torch.cuda.synchronize()
    print(json.dumps({"ok": True, "sum": total, "uid": os.getuid()}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": str(exc).splitlines()[0], "uid": os.getuid()}))
"""

SCENARIOS = (("root->root", {}, {}), ("root(nodump)->root", {"nodump": 1}, {}),
             ("root->user", {}, {"user": 1}), ("root(nodump)->user", {"nodump": 1}, {"user": 1}),
             ("user->root", {"user": 1}, {}), ("user->root(nodump)", {"user": 1}, {"nodump": 1}))


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def scenario(name: str, exporter: dict, importer: dict) -> dict:
    """One pair: did the import work, and did the exporter see the importer's write?"""
    export = subprocess.Popen([sys.executable, "-c", _EXPORT, json.dumps(exporter)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/tmp",
                              preexec_fn=_as_nobody if exporter.get("user") else None)
    handle = export.stdout.readline()
    found = subprocess.run([sys.executable, "-c", _IMPORT, json.dumps(importer), handle],
                           capture_output=True, text=True, cwd="/tmp", timeout=120,
                           preexec_fn=_as_nobody if importer.get("user") else None)
    export.stdin.write("\n")
    export.stdin.flush()
    seen = export.stdout.readline().strip()
    export.wait(timeout=60)
    result = json.loads(found.stdout) if found.stdout.strip() else {"ok": False,
                                                                    "error": found.stderr[-300:]}
    return {"scenario": name, "import": result, "exporter_sum_after": seen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args()
    lines = [json.dumps(scenario(*s)) for s in SCENARIOS]
    print("\n".join(lines))
    if args.output:
        args.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
