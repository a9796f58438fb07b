"""Input seeds: the public seed mixed with a secret drawn per run.

A candidate cannot precompute answers for seeds it can read in a repository: every input comes
from sha256(secret, public seed, workload, phase, index), and neither the secret nor any seed
enters its process: the driver makes the inputs itself and hands over each call's inputs only
when that call starts. Correctness rounds and timed calls use separate phases; warm-up and timed
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
