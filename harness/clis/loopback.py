"""The two loopback servers a CLI under test talks to, and the inbox that joins them.

A CLI is a black box that talks to the world through two channels the driver owns:

* its **model API**: an HTTP server on ``127.0.0.1`` (a free port) whose paths start with
  ``/s/<session id>`` (each session's CLI is given its own base URL), so every request is
  known to come from one session's CLI;
* its **tool runs**: the ledger program (:mod:`harness.clis.tool_command`) connects to a TCP
  server on ``127.0.0.1`` and sends one JSON line naming its session, tool, call id and
  arguments.

Guarantees:

* nothing here calls the world: each model call and each tool run becomes an item of the
  :class:`Inbox` (:class:`ModelExchange`, :class:`LedgerExchange`) that the driver takes in
  the thread of the harness's driver call, so every world port is called from the thread the
  harness admitted, in the order the driver takes the items; the server thread then writes
  what the driver answered, piece by piece, as it comes;
* a model answer ends in one of three ways the driver chooses: :data:`CLOSE` (the body is
  complete; ``Connection: close``, no length: the body ends when the socket closes, so a
  stream that stops early is an EOF cut to the client), or :data:`RESET` (a TCP reset: the
  connection breaks, a transport error);
* requests that are not model calls are answered by the wire module's ``auxiliary_reply``
  in the server thread, never reach the inbox, and are counted (:attr:`Loopback.auxiliary`);
  so are model calls outside the session's conversation that the dialect's ``side_answer``
  answers itself (OpenCode's title requests);
* :meth:`Loopback.close` stops both servers and answers every exchange still waiting with a
  reset, so no server thread outlives it by more than its poll interval; a server thread
  never waits for the driver longer than :data:`EXCHANGE_WAIT_S`.
"""

from __future__ import annotations

import json
import queue
import socket
import socketserver
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

CLOSE = "close"
RESET = "reset"
EXCHANGE_WAIT_S = 600.0
"""Longest a server thread waits for the driver's next piece of an answer."""
POLL_S = 0.2


@dataclass(slots=True)
class ModelExchange:
    """One model call of a session's CLI, waiting for the driver's answer."""

    session_id: str
    path: str
    body: dict[str, Any]
    replies: "queue.Queue[Any]" = field(default_factory=queue.Queue)

    def head(self, status: int, content_type: str) -> None:
        self.replies.put(("head", status, content_type))

    def send(self, data: bytes) -> None:
        self.replies.put(data)

    def end(self, how: str = CLOSE) -> None:
        self.replies.put(how)


@dataclass(slots=True)
class LedgerExchange:
    """One run of the ledger program, waiting for the world's result."""

    session_id: str
    tool: str
    tool_call_id: str
    args: dict[str, Any]
    replies: "queue.Queue[dict[str, Any]]" = field(default_factory=queue.Queue)

    def answer(self, status: str, output: str) -> None:
        self.replies.put({"status": status, "output": output})


@dataclass(frozen=True, slots=True)
class ProcessLine:
    """A line a session's CLI wrote on its stdout (its programmatic channel)."""

    session_id: str
    generation: int
    line: str


@dataclass(frozen=True, slots=True)
class ProcessExited:
    session_id: str
    generation: int
    status: int


class Inbox:
    """What the CLIs did, in arrival order, for the driver to take."""

    def __init__(self) -> None:
        self._queue: "queue.Queue[Any]" = queue.Queue()

    def put(self, item: Any) -> None:
        self._queue.put(item)

    def take(self, timeout: float) -> Any:
        """The next item, or ``None`` after ``timeout`` seconds with nothing."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def drain(self) -> list[Any]:
        items = []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                return items


class Loopback:
    """The model server and the ledger server of one runtime instance."""

    def __init__(self, inbox: Inbox, kind_of: Callable[[str, str], str],
                 auxiliary_reply: Callable[[str], tuple[int, dict[str, Any]]],
                 side_answer: Callable[[dict[str, Any]], tuple[str, bytes] | None] | None = None,
                 ) -> None:
        self.inbox = inbox
        self.auxiliary = 0
        self._open: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        loopback = self

        class ModelHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _route(self, method: str) -> None:
                parts = self.path.split("/", 3)
                session = parts[2] if len(parts) > 2 and parts[1] == "s" else ""
                rest = "/" + (parts[3] if len(parts) > 3 else "")
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                if kind_of(method, rest) != "model" or not session:
                    with loopback._lock:
                        loopback.auxiliary += 1
                    status, payload = auxiliary_reply(rest)
                    self._json(status, payload)
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "the body is not JSON"}})
                    return
                body = body if isinstance(body, dict) else {}
                side = side_answer(body) if side_answer is not None else None
                if side is not None:  # not the session's conversation (a title request)
                    with loopback._lock:
                        loopback.auxiliary += 1
                    content_type, data = side
                    self.send_response(200)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                exchange = ModelExchange(session, rest, body)
                loopback._track(exchange)
                loopback.inbox.put(exchange)
                self._relay(exchange)

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _relay(self, exchange: ModelExchange) -> None:
                self.close_connection = True
                while True:
                    try:
                        item = exchange.replies.get(timeout=EXCHANGE_WAIT_S)
                    except queue.Empty:
                        item = RESET
                    try:
                        if isinstance(item, tuple):
                            _, status, content_type = item
                            self.send_response(status)
                            self.send_header("content-type", content_type)
                            self.send_header("cache-control", "no-cache")
                            self.send_header("connection", "close")
                            self.end_headers()
                            self.wfile.flush()
                        elif isinstance(item, bytes):
                            self.wfile.write(item)
                            self.wfile.flush()
                        else:
                            if item == RESET:
                                # SO_LINGER 0: close() sends a TCP reset, not a clean end
                                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                           struct.pack("ii", 1, 0))
                            return
                    except OSError:
                        return
                    finally:
                        if not isinstance(item, (tuple, bytes)):
                            loopback._untrack(exchange)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self._route("POST")

            def do_GET(self) -> None:  # noqa: N802
                self._route("GET")

            def do_HEAD(self) -> None:  # noqa: N802
                self._route("HEAD")

        class LedgerHandler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(1 << 24)
                try:
                    request = json.loads(line)
                    exchange = LedgerExchange(str(request["session"]), str(request["tool"]),
                                              str(request["tool_call_id"]), dict(request["args"]))
                except (ValueError, KeyError, TypeError):
                    self.wfile.write(b'{"status":"error","output":"bad ledger request"}\n')
                    return
                loopback._track(exchange)
                loopback.inbox.put(exchange)
                try:
                    reply = exchange.replies.get(timeout=EXCHANGE_WAIT_S)
                except queue.Empty:
                    return
                finally:
                    loopback._untrack(exchange)
                if reply.get("status") == RESET:
                    return
                try:
                    self.wfile.write((json.dumps(reply) + "\n").encode())
                except OSError:
                    pass

        class _Threading(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a CLI killed mid-request resets its connection: expected, not news

        class _LedgerServer(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self._model = _Threading(("127.0.0.1", 0), ModelHandler)
        self._ledger = _LedgerServer(("127.0.0.1", 0), LedgerHandler)
        self.model_port = int(self._model.server_address[1])
        self.ledger_port = int(self._ledger.server_address[1])
        self._threads = [threading.Thread(target=server.serve_forever, args=(POLL_S,),
                                          name=f"lh-cli-{name}", daemon=True)
                         for name, server in (("model", self._model), ("ledger", self._ledger))]
        for thread in self._threads:
            thread.start()

    def base_url(self, session_id: str) -> str:
        return f"http://127.0.0.1:{self.model_port}/s/{session_id}"

    def _track(self, exchange: Any) -> None:
        with self._lock:
            if self._closed:
                self._abandon(exchange)
            else:
                self._open.append(exchange)

    def _untrack(self, exchange: Any) -> None:
        with self._lock:
            if exchange in self._open:
                self._open.remove(exchange)

    @staticmethod
    def _abandon(exchange: Any) -> None:
        if isinstance(exchange, ModelExchange):
            exchange.end(RESET)
        else:
            exchange.replies.put({"status": RESET})

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pending, self._open = self._open, []
        for exchange in pending:
            self._abandon(exchange)
        for server in (self._model, self._ledger):
            server.shutdown()
            server.server_close()
