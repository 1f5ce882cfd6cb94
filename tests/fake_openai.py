"""A fake OpenAI-compatible HTTP server for tests: a real `http.server` on 127.0.0.1 with scripted responses.

Each route (e.g. ``/v1/chat/completions``) has a queue of scripted `Reply`s, served in order; when a route's queue
is empty its responder (a callable taking the `Request` and returning a `Reply`) answers, else 404. Every request is
recorded (method, path, headers, JSON body) in ``server.requests``; ``server.max_in_flight`` is the most requests
answered at once. A `Reply` may be delayed (``delay`` seconds, cut short when the server stops) or may block until
``server.release()``.

    with FakeOpenAI() as server:
        server.script("/v1/chat/completions", chat_reply("```python\\nprint(1)\\n```"))
        ... Endpoint(base_url=server.url, model="m") ...
"""
from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@dataclass
class Reply:
    status: int = 200
    body: Any = None                  # a dict/list (sent as JSON) or a str (sent as is)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0                # seconds before answering
    block: bool = False               # wait for server.release() (or stop) before answering


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any                         # parsed JSON, or the raw text when not JSON

    @property
    def prompt_text(self) -> str:
        """The prompt as one string: chat messages' contents joined, or the completions prompt."""
        if not isinstance(self.body, dict):
            return ""
        if "messages" in self.body:
            return "\n".join(str(m.get("content", "")) for m in self.body["messages"])
        return str(self.body.get("prompt", ""))


def usage(prompt: int = 10, completion: int = 20, reasoning: int | None = None,
          cached: int | None = None) -> dict:
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def chat_reply(*texts: str, finish_reason: str | list[str] = "stop", usage_: dict | None = None,
               model: str = "fake-model", reasoning_content: str | None = None, **kw: Any) -> Reply:
    """A chat completion with one choice per text."""
    reasons = finish_reason if isinstance(finish_reason, list) else [finish_reason] * len(texts)
    choices = []
    for i, (t, r) in enumerate(zip(texts, reasons)):
        msg: dict[str, Any] = {"role": "assistant", "content": t}
        if reasoning_content is not None:
            msg["reasoning_content"] = reasoning_content
        choices.append({"index": i, "message": msg, "finish_reason": r})
    body = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model, "choices": choices,
            "usage": usage() if usage_ is None else usage_}
    return Reply(body=body, **kw)


def completion_reply(*texts: str, finish_reason: str = "stop", usage_: dict | None = None,
                     model: str = "fake-model", **kw: Any) -> Reply:
    """A plain (text) completion with one choice per text."""
    choices = [{"index": i, "text": t, "finish_reason": finish_reason, "logprobs": None} for i, t in enumerate(texts)]
    body = {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": model, "choices": choices,
            "usage": usage() if usage_ is None else usage_}
    return Reply(body=body, **kw)


def error_reply(status: int, message: str = "error", **kw: Any) -> Reply:
    return Reply(status=status, body={"error": {"message": message, "type": "fake", "code": status}}, **kw)


class FakeOpenAI:
    """The server. Start with `start()` or as a context manager; `url` is the base URL (``.../v1``)."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[Reply]] = defaultdict(deque)
        self.responders: dict[str, Callable[[Request], Reply]] = {}
        self.requests: list[Request] = []
        self.in_flight = 0               # requests being answered now
        self.max_in_flight = 0           # the most answered at once
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._released = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting ---
    def script(self, route: str, *replies: Reply) -> None:
        with self._lock:
            self.queues[route].extend(replies)

    def respond(self, route: str, responder: Callable[[Request], Reply]) -> None:
        self.responders[route] = responder

    def release(self) -> None:
        """Let blocked replies answer."""
        self._released.set()

    def requests_to(self, route: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == route]

    # --- lifecycle ---
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                path = self.path.split("?", 1)[0]
                req = Request(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.requests.append(req)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    queue = server.queues.get(path)
                    reply = queue.popleft() if queue else None
                try:
                    self._answer(req, path, reply)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, req: Request, path: str, reply: Reply | None) -> None:
                if reply is None:
                    responder = server.responders.get(path)
                    reply = responder(req) if responder else error_reply(404, f"no route {path}")
                if reply.block:
                    while not (server._released.is_set() or server._stopping.is_set()):
                        server._released.wait(0.05)
                if reply.delay:
                    server._stopping.wait(reply.delay)
                if server._stopping.is_set() and (reply.delay or reply.block):
                    return
                payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                data = payload.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_POST = _handle
            do_GET = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
