"""A child process's stdout and stderr, drained continuously and kept bounded.

A thread reads the pipe as fast as the child writes, so a flood never blocks the child (which
would look like a hang) and never fills the driver's memory: only the first and last
`keep_bytes` are kept, with a count of what was dropped. The text is a log for people; the
driver never parses it for results.
"""

from __future__ import annotations

import threading
from typing import IO


class OutputLog:
    def __init__(self, stream: IO[bytes], keep_bytes: int = 32 * 1024) -> None:
        self.keep_bytes = keep_bytes
        self.total_bytes = 0
        self._head = bytearray()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: IO[bytes]) -> None:
        while True:
            try:
                chunk = stream.read1(1 << 16)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            with self._lock:
                self._append(chunk)

    def _append(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        room = self.keep_bytes - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        self._tail += chunk
        del self._tail[:-self.keep_bytes]

    def wait(self, seconds: float) -> None:
        """Let the drain reach the end of the stream (bounded: a forked child may hold it)."""
        self._thread.join(seconds)

    def text(self) -> str:
        with self._lock:
            dropped = self.total_bytes - len(self._head) - len(self._tail)
            parts = [self._head.decode(errors="replace")]
            if dropped > 0:
                parts.append(f"\n[... {dropped} bytes of output dropped ...]\n")
            parts.append(self._tail.decode(errors="replace"))
        return "".join(parts)

    def tail(self, chars: int = 4000) -> str:
        text = self.text()
        return text if len(text) <= chars else "..." + text[-chars:]
