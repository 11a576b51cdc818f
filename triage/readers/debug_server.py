"""PyTorch's debug server, read over HTTP: which worker serves each rank, and what it answers.

`torch.distributed.debug.start_debug_server(port)` (torch 2.10+, experimental) starts an HTTP
worker in every rank, registered in the job's TCPStore as `debug_server/rank{R}` =
`http://HOST:PORT`, and on rank 0 a frontend at `port` whose pages fan requests out to every
worker. The frontend's `/tcpstore` page lists the store's keys without asking any worker, so
it names every registered worker even while ranks hang. The workers are then asked directly,
in parallel (POST `/handler/NAME`), each request with its own deadline: a rank that does not
answer costs its own evidence, never the others'. A worker that cannot be connected to from
here (only the frontend's port is forwarded, or its host name does not resolve here) is read
through the frontend's fan-out page, which holds every rank's raw reply.

Standard library only; nothing here changes the job.
"""

from __future__ import annotations

import html
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.client import HTTPResponse

MAX_REPLY = 64 << 20
PARALLEL = 64
#: The frontend page that carries each worker handler's replies, one section per rank
#: (torch/distributed/debug/_debug_handlers.py: StacksHandler, FlightRecorderHandler).
FRONTEND_PAGES = {
    "dump_traceback": "/stacks",
    "fr_trace_json": "/fr_trace_json",
    "dump_nccl_trace_json": "/fr_trace_nccl_json",
}

#: Straight to the job: an http_proxy set for the internet must not carry cluster-internal calls.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.\-]+)):(?P<port>\d+)$")
_WORKER_KEY = re.compile(r"debug_server/rank(?P<rank>\d+): b'(?P<url>https?://[^'\s<>]+)'")
_SECTION = re.compile(
    r"<h[23]>Rank (?P<rank>\d+): [^<]*</h[23]>\s*"
    r"(?:<p>Failed to fetch: status=(?P<status>\d+)</p>\s*)?<pre>(?P<body>.*?)</pre>",
    re.DOTALL,
)


class DebugServerError(Exception):
    """The frontend did not answer as torch's debug server does; the message is one line."""


@dataclass(frozen=True)
class Reply:
    """One answer: its body, or why there is none. `unreachable`: no connection could be
    made at all (unlike a worker that took the request and did not answer in time)."""

    body: bytes | None
    error: str = ""
    unreachable: bool = False


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[IPv6]:PORT`; an `http://` in front and a `/` after are allowed."""
    found = _ADDRESS.match(text.strip().removeprefix("http://").rstrip("/"))
    if found is None or not 0 < int(found["port"]) < 65536:
        raise ValueError(
            f"expected HOST:PORT (rank 0's host, the port given to start_debug_server), got {text!r}"
        )
    return found["v6"] or found["host"], int(found["port"])


class DebugServer:
    """Rank 0's frontend at `host:port`; every request waits at most `timeout_s`."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.base = f"http://{self.address}"
        self.timeout_s = timeout_s

    def workers(self) -> dict[int, str]:
        """Rank -> its worker's base URL, as the ranks registered them in the TCPStore."""
        reply = _request(f"{self.base}/tcpstore", self.timeout_s, post=False)
        if reply.body is None:
            if reply.unreachable:
                raise DebugServerError(f"nothing answers at {self.address}: {reply.error}")
            raise DebugServerError(f"{self.address} is not torch's debug server: {reply.error}")
        text = html.unescape(reply.body.decode("utf-8", "replace"))
        found = {int(m["rank"]): m["url"].rstrip("/") for m in _WORKER_KEY.finditer(text)}
        if not found:
            raise DebugServerError(
                f"{self.address} answers, but no rank registered a debug server worker"
                " (no debug_server/rank* key in its TCPStore)"
            )
        return found

    def ask(
        self, workers: Mapping[int, str], handlers: Sequence[str]
    ) -> dict[tuple[int, str], Reply]:
        """Every handler of every worker, all at once; (rank, handler) -> its reply."""
        calls = [(rank, name) for rank in sorted(workers) for name in handlers]
        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(calls)))) as pool:
            answers = pool.map(
                lambda call: _request(
                    f"{workers[call[0]]}/handler/{call[1]}", self.timeout_s, post=True
                ),
                calls,
            )
            replies = dict(zip(calls, answers, strict=True))
            lost = {
                name: ranks
                for name in handlers
                if name in FRONTEND_PAGES
                and (ranks := [r for r in sorted(workers) if replies[(r, name)].unreachable])
            }
            read = list(
                pool.map(lambda name: self._through_frontend(name, lost[name], replies), lost)
            )
        for found in read:
            replies |= found
        return replies

    def _through_frontend(
        self, handler: str, ranks: list[int], replies: Mapping[tuple[int, str], Reply]
    ) -> dict[tuple[int, str], Reply]:
        """The ranks' replies from the frontend's fan-out page; each unread rank keeps its
        own error with the frontend's added."""
        page = _request(f"{self.base}{FRONTEND_PAGES[handler]}", self.timeout_s, post=False)
        text = page.body.decode("utf-8", "replace") if page.body is not None else ""
        sections = {int(m["rank"]): m for m in _SECTION.finditer(text)}
        out = {}
        for rank in ranks:
            own = replies[(rank, handler)].error
            found = sections.get(rank)
            if found is not None and not found["status"]:
                out[(rank, handler)] = Reply(html.unescape(found["body"]).encode())
            elif found is not None:
                why = html.unescape(found["body"]).strip().splitlines()
                failed = f"HTTP {found['status']}" + (f" {why[0][:160]}" if why else "")
                out[(rank, handler)] = Reply(None, f"{own}; through the frontend: {failed}")
            else:
                failed = page.error or "no section for this rank on its page"
                out[(rank, handler)] = Reply(None, f"{own}; through the frontend: {failed}")
        return out


def _request(url: str, timeout_s: float, post: bool) -> Reply:
    """One HTTP request that never raises: the body, or the reason in one line. torch's
    worker serves its handlers on POST only; the frontend's pages on GET."""
    call = urllib.request.Request(url, data=b"" if post else None, method="POST" if post else "GET")
    try:
        with _OPENER.open(call, timeout=timeout_s) as answer:
            return Reply(_read(answer, time.monotonic() + timeout_s))
    except urllib.error.HTTPError as exc:
        return Reply(None, f"HTTP {exc.code} {exc.reason}")
    except urllib.error.URLError as exc:  # the connection (or sending the request) failed
        reason = exc.reason
        why = reason.strerror or str(reason) if isinstance(reason, OSError) else str(reason)
        return Reply(None, f"cannot connect: {why}", unreachable=True)
    except TimeoutError:
        return Reply(None, f"no answer within {timeout_s:g}s")
    except (OSError, ValueError) as exc:  # reset mid-reply, too large, a malformed URL
        return Reply(None, f"{type(exc).__name__}: {exc}".splitlines()[0])


def _read(answer: HTTPResponse, deadline: float) -> bytes:
    """The body within the deadline and MAX_REPLY bytes: a worker that trickles its answer
    gets no longer than one that sends nothing."""
    chunks: list[bytes] = []
    size = 0
    while chunk := answer.read(1 << 16):
        size += len(chunk)
        if size > MAX_REPLY:
            raise ValueError(f"reply over {MAX_REPLY >> 20} MiB")
        if time.monotonic() > deadline:
            raise TimeoutError
        chunks.append(chunk)
    return b"".join(chunks)
