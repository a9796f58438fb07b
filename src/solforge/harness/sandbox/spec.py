"""What the launcher applies to one sandboxed process (the driver decides, the launcher obeys)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class SandboxSpec:
    cwd: str  # the private folder: never inside the cache or any folder of the driver's
    writable: tuple[str, ...]  # the only folders it may change (Landlock)
    uid: int | None = None  # a private uid (root only); None: keep the driver's
    pid_namespace: bool = False
    user_namespace: bool = False  # needed for the PID namespace without root
    landlock: bool = False
    seccomp: bool = False
    keep_fds: tuple[int, ...] = ()  # the pipes the launcher hands to its child
    reveal: dict[str, list[str]] = field(default_factory=dict)  # see namespace.reveal

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SandboxSpec:
        raw = json.loads(text)
        tuples = ("writable", "keep_fds")
        return cls(**{k: tuple(v) if k in tuples else v for k, v in raw.items()})
