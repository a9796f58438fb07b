"""Process-level isolation of everything the candidate runs (its worker and its build).

One module per defense: identity.py (private uid, no capabilities, no_new_privs), namespace.py
(PID namespace with its own /proc), landlock.py (writes only in a private folder), seccomp.py
(no ptrace or cross-process memory calls), driver.py (the driver not dumpable; killing every
process of a sandbox). policy.py decides what this machine supports, box.py makes one sandbox,
launcher.py + enter.py start the sandboxed interpreter.

The driver's names below are imported on first use, so the launcher (which imports this
package before the sandbox is in place) loads only the few modules it applies.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {"Sandbox": "box", "Policy": "policy", "policy_for": "policy",
          "protected_driver": "driver", "SandboxSpec": "spec"}
__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
