"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

A real HTTP server (stdlib ``http.server`` in a thread, port 0) that checks each request
against the chat-completions protocol (``model``, ``messages``, ``response_format`` of type
``json_schema``/``json_object``, ``tools``) and answers with protocol JSON: ``choices`` with
``message.content`` or ``message.tool_calls`` (when the request offers tools), ``refusal``,
``finish_reason`` and ``usage``. Each request takes the next scripted reply; when the script
is empty, ``responder(request)`` decides (default: HTTP 500).

Replies are functions of the request, built by :func:`answer`, :func:`text`,
:func:`truncated`, :func:`refusal`, :func:`http_error` and :func:`slow`.

Two endpoints that never answer a request, for the exit tests: :class:`HangingServer`
(accepts connections, never answers) and :func:`refusing_url` (nothing listens).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

ROLES = {"system", "user", "assistant", "tool", "developer"}


@dataclass
class Response:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


Reply = Callable[[dict[str, Any]], Response]


def schema_name(request: dict[str, Any]) -> str | None:
    """The answer schema a request asks for: the tool's name or the json_schema's name."""
    if request.get("tools"):
        return request["tools"][0]["function"]["name"]
    fmt = request.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt["json_schema"]["name"]
    return None


def last_user_text(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _completion(request: dict[str, Any], content: str | None, *, finish: str = "stop",
                refusal_text: str | None = None) -> dict[str, Any]:
    """A chat.completion object; the answer goes into a tool call when the request has tools."""
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": refusal_text}
    if content is not None and request.get("tools"):
        message["tool_calls"] = [{"id": "call_0", "type": "function",
                                  "function": {"name": schema_name(request), "arguments": content}}]
        finish = "tool_calls" if finish == "stop" else finish
    else:
        message["content"] = content
    prompt = sum(_tokens(m.get("content") or "") for m in request["messages"])
    completion = _tokens(content or refusal_text or "")
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
        "model": request.get("model", "test"), "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def answer(obj: Any) -> Reply:
    """A well-formed answer: ``obj`` as JSON (content, or tool-call arguments)."""
    return lambda req: Response(200, _completion(req, json.dumps(obj)))


def tool_calls(*calls: tuple[str, Any]) -> Reply:
    """An answer calling each named tool with its arguments (a str is sent verbatim, so a
    malformed call can be scripted); no calls at all is a plain text answer."""
    def reply(req: dict[str, Any]) -> Response:
        body = _completion(req, None)
        message = body["choices"][0]["message"]
        message["content"] = None if calls else "done"
        if calls:
            message["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {
                "name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(calls)]
            body["choices"][0]["finish_reason"] = "tool_calls"
        return Response(200, body)
    return reply


def text(raw: str, *, finish: str = "stop") -> Reply:
    """An answer whose text is ``raw`` verbatim (e.g. malformed JSON)."""
    return lambda req: Response(200, _completion(req, raw, finish=finish))


def truncated(raw: str = '{"actions": [{"type": "gro') -> Reply:
    """An answer cut off by the token limit (``finish_reason: "length"``)."""
    return text(raw, finish="length")


def refusal(message: str = "I can't help with that.") -> Reply:
    """A structured-outputs refusal: ``content`` null, ``message.refusal`` set."""
    return lambda req: Response(200, _completion(req, None, refusal_text=message))


def http_error(status: int, *, retry_after: float | None = None) -> Reply:
    """An API error with the protocol's error body (429 carries ``Retry-After``)."""
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    kind = "rate_limit_exceeded" if status == 429 else "server_error"
    return lambda req: Response(status, {"error": {"message": f"scripted {status}", "type": kind,
                                                   "param": None, "code": kind}}, headers)


def slow(seconds: float, then: Reply) -> Reply:
    """``then``, sent after ``seconds``."""
    def reply(req: dict[str, Any]) -> Response:
        resp = then(req)
        resp.delay = seconds
        return resp
    return reply


def check_request(body: Any) -> str | None:
    """Why ``body`` is not a valid chat-completions request (None when it is)."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model is missing"
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return "messages must be a non-empty list"
    for m in msgs:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"bad message {m!r}"
        if m["role"] != "assistant" and not isinstance(m.get("content"), (str, list)):
            return f"message without content: {m!r}"
    fmt = body.get("response_format")
    if fmt is not None:
        if fmt.get("type") not in {"json_schema", "json_object", "text"}:
            return f"bad response_format type {fmt.get('type')!r}"
        if fmt["type"] == "json_schema":
            js = fmt.get("json_schema") or {}
            if not isinstance(js.get("name"), str) or not isinstance(js.get("schema"), dict):
                return "json_schema needs a name and a schema"
    for tool in body.get("tools") or []:
        fn = tool.get("function") or {}
        if tool.get("type") != "function" or not isinstance(fn.get("name"), str) \
                or not isinstance(fn.get("parameters"), dict):
            return f"bad tool {tool!r}"
    if body.get("stream"):
        return "streaming is not supported by this test server"
    return None


class OpenAITestServer:
    """The server; use as a context manager or call :meth:`start` / :meth:`stop`."""

    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None):
        self.script: deque[Reply] = deque()
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.bad_requests: list[str] = []
        self.errors: list[str] = []  # exceptions raised by scripted replies or responders
        self.inflight = 0
        self.max_inflight = 0  # most requests handled at once (concurrency-limit tests)
        self._lock = threading.Lock()
        self._stopped = threading.Event()  # set by stop(): no slow reply outlives its test
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                server._enter()
                try:
                    resp = server._handle(self.path, body)
                    if resp.delay:  # a slow server; stop() cuts the wait short
                        server._stopped.wait(resp.delay)
                except Exception:  # a bug in a test's script: recorded, and the test fails
                    server.errors.append(traceback.format_exc())
                    resp = Response(500, {"error": {"message": "test server error", "type": "server_error"}})
                finally:
                    server._leave()
                data = json.dumps(resp.body).encode()
                try:
                    self.send_response(resp.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in resp.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def push(self, *replies: Reply) -> "OpenAITestServer":
        self.script.extend(replies)
        return self

    def start(self) -> "OpenAITestServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "OpenAITestServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _enter(self) -> None:
        with self._lock:
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)

    def _leave(self) -> None:
        with self._lock:
            self.inflight -= 1

    def _handle(self, path: str, body: Any) -> Response:
        if not path.rstrip("/").endswith("/chat/completions"):
            return Response(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        problem = check_request(body)
        with self._lock:
            if problem:
                self.bad_requests.append(problem)
                return Response(400, {"error": {"message": problem, "type": "invalid_request_error",
                                                "param": None, "code": None}})
            self.requests.append(body)
            reply = self.script.popleft() if self.script else None
        if reply is None:
            reply = self.responder(body) if self.responder else http_error(500)
        return reply(body)


class HangingServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers: a client
    without a timeout waits forever. Connections are held until :meth:`stop`."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed by stop()
                return
            self.accepted.append(conn)

    def start(self) -> "HangingServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._sock.close()
        for conn in self.accepted:
            conn.close()

    def __enter__(self) -> "HangingServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def refusing_url() -> str:
    """The URL of a local port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
