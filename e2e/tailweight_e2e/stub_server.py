"""A small HTTP server on 127.0.0.1 for tests and the harness: binds port 0 (the kernel's choice),
serves from a daemon thread, and hands every request to one function that returns the reply.

http.server is enough for what these stand in for (an exporter, the aggregator's network side, an
application, the harness's report tap: a handful of requests per second), and it needs no
dependency."""
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    # (name, value) pairs in order, a name possibly more than once; content-length is added.
    headers: Sequence[tuple[str, str]] = field(default_factory=tuple)


class StubServer:
    """`handle(request) -> Reply` for every GET, POST, PUT and DELETE, each on its own thread.
    `keep_alive`: HTTP/1.1 persistent connections (as a proxy reusing its connection expects);
    otherwise HTTP/1.0, one request per connection. `host`: a loopback address (the Istio tests give
    each pod its own 127.0.0.x)."""

    def __init__(self, handle: Callable[[Request], Reply], keep_alive: bool = False, name: str = "stub-server",
                 host: str = "127.0.0.1"):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def _serve(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = handle(Request(self.command, self.path, headers, body))
                self.send_response(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = do_PUT = do_DELETE = _serve  # noqa: N815 - the http.server API

            def log_message(self, *_):
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self._thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def start(self) -> "StubServer":
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "StubServer":
        return self.start() if not self._thread.is_alive() else self

    def __exit__(self, *_) -> None:
        self.close()
