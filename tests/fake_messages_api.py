"""A local Messages API on loopback, so tests drive the real `anthropic` SDK code path.

Each POST /v1/messages gets the next scripted reply: a message (text and tool_use
blocks), an HTTP error with the API's error body (529 overloaded, 500), or a reply held
back past the client's timeout. Every request body is recorded, raw and parsed, so tests
can assert what was sent: tools offered, tool results, history, and that no secret left.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

_ids = itertools.count(1)


@dataclass
class Scripted:
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    hold_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name, "input": params}


def message(*blocks: dict[str, Any], input_tokens: int = 100, output_tokens: int = 20) -> Scripted:
    uses_tools = any(b["type"] == "tool_use" for b in blocks)
    return Scripted(
        body={
            "id": f"msg_{next(_ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": list(blocks),
            "stop_reason": "tool_use" if uses_tools else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": input_tokens // 2,
            },
        }
    )


def _error(status: int, kind: str, text_: str) -> Scripted:
    # `retry-after-ms` keeps the SDK's own retry fast while still exercising it.
    return Scripted(
        status=status,
        body={"type": "error", "error": {"type": kind, "message": text_}},
        headers={"retry-after-ms": "5"},
    )


def overloaded() -> Scripted:
    return _error(529, "overloaded_error", "Overloaded")


def server_error() -> Scripted:
    return _error(500, "api_error", "Internal server error")


def held(seconds: float) -> Scripted:
    """A reply that comes only after `seconds` (or when the server stops)."""
    return Scripted(hold_s=seconds, body=message(text("too late")).body)


class FakeMessagesApi:
    def __init__(self, *replies: Scripted) -> None:
        self.replies = list(replies)
        self.bodies: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *replies: Scripted) -> None:
        with self._lock:
            self.replies += replies

    def __enter__(self) -> FakeMessagesApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, raw: str) -> Scripted:
        with self._lock:
            self.bodies.append(raw)
            self.requests.append(json.loads(raw))
            if self.replies:
                return self.replies.pop(0)
        return _error(500, "api_error", "the test script has no reply left")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                if self.path.split("?")[0] != "/v1/messages":
                    self.send_error(404)
                    return
                reply = api._next(raw)
                if reply.hold_s:
                    api.stopping.wait(reply.hold_s)
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting, as the test meant it to

        return Handler


def serving(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMessagesApi]:
    """A running fake API for a fixture; the SDK finds it through the variables it reads
    itself (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY)."""
    with FakeMessagesApi() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-00000000000000000000")
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        yield api
