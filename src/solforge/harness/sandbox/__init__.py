"""Process-level isolation of everything the candidate runs (its worker and its build).

One module per defense: identity.py (private uid, no capabilities, no_new_privs), namespace.py
(PID namespace with its own /proc), landlock.py (writes only in a private folder), seccomp.py
(no ptrace or cross-process memory calls), driver.py (the driver not dumpable; killing every
process of a sandbox). policy.py decides what this machine supports, box.py makes one sandbox,
launcher.py + enter.py start the sandboxed interpreter.
"""

from solforge.harness.sandbox.box import Sandbox
from solforge.harness.sandbox.driver import protected_driver
from solforge.harness.sandbox.policy import Policy, policy_for
from solforge.harness.sandbox.spec import SandboxSpec

__all__ = ["Policy", "Sandbox", "SandboxSpec", "policy_for", "protected_driver"]
