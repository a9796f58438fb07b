"""What the worker's guard check costs per timed call, part by part, alone on the machine.

    python benchmarks/guard_cost.py [-o OUT.json] [--device cuda|cpu] [--repeats 300]

The phase table charges `loop_checks` with the worker's work before each timed call: its
poisoned output buffers and `Guards.check(children=False)` (harness/guards.py). With 3 units on
an H100 (2026-12-05) that was 0.11 s per timed loop, about 3 ms per call, where the same check
took 0.76 ms on a 2-core CPU machine with PyTorch's CPU build. This builds the guards the way a
worker does (the harness's modules imported, on the device) and times, in ms per call (median
of `--repeats` after 20 untimed), the whole check and each of its parts:
- `identities`: every watched name, `sys.modules` entry and harness object, by identity, and
  every watched Python function's code, defaults and closure (harness/identities.py);
  `identities_at_return` is the same check as the worker runs it in the frame that called the
  candidate, the moment each call returns: with dict watchers (Python 3.12 and later,
  harness/dict_watch.py) it compares the names only when CPython counted a change to their
  namespaces (`dict_watchers` says whether it could);
- `per_timed_call`: what the worker checks around each timed call (that check at the return,
  then `check_returned`, then `check_threads` before the next call), without the buffers;
- `hooks`: the dispatcher entries (`dispatch_dumps`, one `_dispatch_dump` per watched op), the
  Python kernels on those ops (`python_kernels`) and the mode stacks;
- `threads`: the signal masks of the process's threads and the CPU time of its Python threads
  since the last return;
- `poisoned_outputs`: one poisoned output buffer of 16 MiB (the worker's `allocate`).
It says whether the per-call check is dear in itself or only under the load of a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import checked_device, log, recorded_environment, write_record  # noqa: E402

from solforge.harness import guards as guard_module  # noqa: E402
from solforge.harness import worker  # noqa: E402  (the worker's modules, as it loads them)
from solforge.harness.identities import identity_changes  # noqa: E402

WARM = 20


def ms_per_call(step: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Median ms of `repeats` calls of `step` after WARM untimed (the device synchronized)."""
    for _ in range(WARM):
        step()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def parts(guards: guard_module.Guards) -> dict[str, Callable[[], Any]]:
    """The check and each of its parts, as the check calls them."""
    hooks, state = guards.hooks, guards.identities.state
    return {
        "check": lambda: guards.check(children=False),
        "per_timed_call": lambda: (identity_changes(state), guards.check_returned(),
                                   guards.check_threads(children=False)),
        "identities": guards.identities.changed,
        "identities_at_return": lambda: identity_changes(state),
        "hooks": hooks.changed,
        "dispatch_dumps": lambda: [guard_module._dispatch_dump(op) for op in hooks.ops],
        "python_kernels": lambda: [guard_module._python_kernels(op) for op in hooks.ops],
        "audit": guards.audit.changed,
        "threads": lambda: (guards._unblocked_threads(), guards.after_return.busy()),
    }


def measure(device: torch.device, repeats: int) -> dict[str, Any]:
    guards = guard_module.Guards(device)
    if guards.check(children=False):
        raise SystemExit(f"the guards found violations in a clean process: "
                         f"{guards.check(children=False)}")
    rows = {name: ms_per_call(step, repeats, device) for name, step in parts(guards).items()}
    rows["poisoned_outputs"] = ms_per_call(
        lambda: worker.poisoned((4096, 1024), torch.float32, device), repeats, device)
    for name, ms in rows.items():
        log(f"{name:<18} {ms:.4f} ms")
    identities = guards.identities
    return {"ms_median": rows, "watched_ops": len(guards.hooks.ops),
            "watched_names": identities.watched_names(),
            "watched_functions": identities.watched_functions(),
            "dict_watchers": identities.gate() is not None,
            "dispatch_dump_chars": sum(len(guard_module._dispatch_dump(op) or "")
                                       for op in guards.hooks.ops)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=None)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    device = checked_device(args.device, args.repeats)
    record = {"what": "ms per guard check (harness/guards.py) and its parts, alone on the machine",
              "environment": recorded_environment(args.device), "repeats": args.repeats,
              **measure(device, args.repeats)}
    write_record(record, args.output)


if __name__ == "__main__":
    main()
