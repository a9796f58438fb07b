"""Input seeds: the public seed mixed with a secret drawn per run.

A candidate cannot precompute answers for seeds it can read in a repository: every input it sees
comes from sha256(secret, public seed, workload, phase, index), and the secret never enters its
process. The driver hands out each seed only when the inputs are generated, one timed iteration
at a time, so even a candidate that reads its own process's memory cannot see the inputs of a
call before that call. Correctness rounds and timed calls use separate phases; warm-up and timed
calls share one ("call"), so nothing tells them apart.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

ROUND = "round"
CALL = "call"


def draw_secret() -> int:
    return secrets.randbits(63)


@dataclass(frozen=True)
class SeedPlan:
    secret: int
    public: int = 0

    def seed(self, workload_uuid: str, phase: str, index: int) -> int:
        text = f"{self.secret}:{self.public}:{workload_uuid}:{phase}:{index}"
        digest = hashlib.sha256(text.encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
