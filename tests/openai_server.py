"""A local stand-in for an OpenAI-compatible endpoint, for the LLM proposer's tests.

It speaks POST /v1/chat/completions (and /chat/completions) on 127.0.0.1 at a free port, from a
thread. By default it answers a kernel prompt with a real, correct Triton kernel for the
problem the prompt names (RMSNorm for the rmsnorm fixture) and a rewrite prompt with a new
component, with usage token counts. Tests script its next answers: a 429 with Retry-After, a
500, a 400, text without code, or a kernel that does not compile. It records every request.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KERNEL = "kernel"
BROKEN = "broken"  # a kernel that calls a Triton function that does not exist
GARBAGE = "garbage"
RATE_LIMIT = "429"
SERVER_ERROR = "500"
BAD_REQUEST = "400"
PATHS = ("/v1/chat/completions", "/chat/completions")

RMSNORM_KERNEL = '''\
"""RMSNorm with ROWS rows per program: each row is read once, reduced in float32, written once.

Per row: read H bf16 inputs, write H bf16 outputs; the weight (H bf16) is shared by the rows of
a program. The reference's rounding is kept: normalise in float32, round to bfloat16, scale.
"""

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_rows(x_ptr, weight_ptr, out_ptr, n_rows, n_cols, eps,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=1) / n_cols
    normalized = x * tl.rsqrt(mean_square + eps)[:, None]
    weight = tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    scaled = normalized.to(tl.bfloat16).to(tl.float32) * weight[None, :]
    tl.store(out_ptr + offsets, scaled.to(tl.bfloat16), mask=mask)


def run(hidden_states, norm_weight, eps, output):
    n_rows, n_cols = hidden_states.shape
    rows_per_program = 4
    grid = (triton.cdiv(n_rows, rows_per_program),)
    _rmsnorm_rows[grid](hidden_states, norm_weight, output, n_rows, n_cols, eps,
                        ROWS=rows_per_program, BLOCK=triton.next_power_of_2(n_cols))
'''
KERNELS = {"rmsnorm": RMSNORM_KERNEL}
# The same kernel with one typo: Triton has no tl.rsqrt_of, so it cannot be compiled.
BROKEN_KERNELS = {"rmsnorm": RMSNORM_KERNEL.replace("tl.rsqrt(", "tl.rsqrt_of(")}
REWRITTEN_COMPONENT = ("- Measure the parent against T_SOL before changing anything.\n"
                       "- Mask every tail; accumulate in float32.")
GARBAGE_TEXT = "I would fuse the reduction with the scaling, but I will not write the code."


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class FakeOpenAI:
    """The server; use it as a context manager."""

    def __init__(self, retry_after: str = "7") -> None:
        self.retry_after = retry_after
        self.script: deque[str] = deque()
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._http.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def then(self, *behaviours: str) -> None:
        """The next answers, in order; after them, KERNEL."""
        self.script.extend(behaviours)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append({"path": path, "authorization": headers.get("authorization"),
                                  "body": body})
            behaviour = self.script.popleft() if self.script else KERNEL
        if path not in PATHS:
            return _error(404, f"no route {path}")
        if behaviour == RATE_LIMIT:
            return _error(429, "rate limit reached", {"Retry-After": self.retry_after})
        if behaviour == SERVER_ERROR:
            return _error(500, "the model server crashed")
        if behaviour == BAD_REQUEST:
            return _error(400, "unknown parameter")
        return self._completion(body, _content(body, behaviour))

    def _completion(self, body: dict[str, Any], text: str) -> Reply:
        prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt_chars // 4 + 1, "completion_tokens": len(text) // 4 + 1}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        with self._lock:
            self.usages.append(usage)
        message = {"role": "assistant", "content": text}
        return Reply(200, {"id": f"chatcmpl-{len(self.usages)}", "object": "chat.completion",
                           "created": int(time.time()), "model": body.get("model", "?"),
                           "choices": [{"index": 0, "message": message,
                                        "finish_reason": "stop"}],
                           "usage": usage}, {})


def _content(body: dict[str, Any], behaviour: str) -> str:
    prompt = "\n".join(m.get("content") or "" for m in body.get("messages", []))
    if behaviour == GARBAGE:
        return GARBAGE_TEXT
    if "<component>" in prompt:
        return f"Here is the rewrite.\n<component>\n{REWRITTEN_COMPONENT}\n</component>"
    kernels = BROKEN_KERNELS if behaviour == BROKEN else KERNELS
    named = re.search(r"^# Problem: (\S+)", prompt, re.MULTILINE)
    problem = named.group(1) if named else ""
    source = next((code for key, code in kernels.items() if key in problem), None)
    if source is None:
        return GARBAGE_TEXT
    return ("One program per four rows, reduced in float32 in registers.\n\n"
            f"```python\n{source}```\n")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"error": {"message": message, "type": "test_error", "code": status}}
    return Reply(status, body, headers or {})


def _handler_for(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = server.answer(self.path, headers, body)
            payload = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests read `server.requests` instead."""

    return Handler
