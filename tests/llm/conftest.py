"""A real HTTP server on 127.0.0.1 that answers like an LLM provider (OpenAI-compatible chat
completions, Anthropic messages, Gemini generateContent) with a scripted completion, and keeps every
request it received so tests can assert on what left the machine."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeLLM:
    url: str
    completion: str = "{}"
    delay: float = 0.0
    status: int = 200
    requests: list[Captured] = field(default_factory=list)

    def envelope(self, path: str) -> dict[str, Any]:
        if path.endswith("/chat/completions"):
            return {"id": "c1", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": self.completion},
                                 "finish_reason": "stop"}]}
        if path.endswith("/v1/messages"):
            return {"id": "m1", "type": "message", "role": "assistant",
                    "content": [{"type": "text", "text": self.completion}], "stop_reason": "end_turn"}
        if ":generateContent" in path:
            return {"candidates": [{"content": {"role": "model", "parts": [{"text": self.completion}]},
                                    "finishReason": "STOP"}]}
        raise AssertionError(f"unexpected path {path}")


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    state: dict[str, FakeLLM] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            llm = state["llm"]
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            llm.requests.append(Captured(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            if llm.delay:
                time.sleep(llm.delay)
            data = json.dumps(llm.envelope(self.path)).encode()
            try:
                self.send_response(llm.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["llm"] = FakeLLM(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["llm"]
    finally:
        server.shutdown()
        server.server_close()
