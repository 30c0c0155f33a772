"""Between the client Envoys' filters and the aggregator: forwards every request (the filters' reports
to /v1/report) and its reply unchanged, and keeps each reporter's last report, so the harness can
tell which endpoints each client Envoy tracks (a report lists them: those that answered it within
the filter's endpoint ttl). Neither the filter nor the aggregator exposes that list otherwise.

It runs in the harness process (a thread; a handful of reports per second) and binds 127.0.0.1
port 0."""
import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Request headers worth passing on (the shard header lets aggregator replicas shard by cluster).
_FORWARDED = ("content-type", "x-tailweight-shard")


class ReportTap:
    def __init__(self, upstream_port: int, timeout_s: float = 5.0):
        self.upstream_port = upstream_port
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, dict]] = {}  # reporter -> (monotonic time, report)
        tap = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: Envoy reuses its connection

            def do_POST(self):  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                tap._note(body)
                status, content_type, reply = tap._forward(self.path, body, self.headers)
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="report-tap", daemon=True)

    def start(self) -> "ReportTap":
        self._thread.start()
        return self

    def forward_to(self, upstream_port: int) -> None:
        """Send what comes next to an aggregator on another port (one restarted on port 0), as a
        Service address stays the same while the pod behind it is replaced."""
        self.upstream_port = upstream_port

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _note(self, body: bytes) -> None:
        try:
            report = json.loads(body)
            reporter = str(report["reporter"])
        except (ValueError, KeyError, TypeError):
            return  # not a report: the aggregator answers it as it sees fit
        with self._lock:
            self._last[reporter] = (time.monotonic(), report)

    def _forward(self, path: str, body: bytes, headers) -> tuple[int, str, bytes]:
        """The aggregator's reply; 503 when it cannot be reached (as Envoy answers for a dead upstream)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=self.timeout_s)
        try:
            conn.request("POST", path, body, {h: headers[h] for h in _FORWARDED if headers.get(h)})
            r = conn.getresponse()
            return r.status, r.getheader("content-type", "text/plain"), r.read()
        except OSError as e:
            return 503, "text/plain", f"aggregator unreachable: {e}\n".encode()
        finally:
            conn.close()

    def tracked(self, cluster: str) -> dict[str, dict]:
        """Per reporter: the endpoints of `cluster` its last report listed and how old that report is
        (s)."""
        with self._lock:
            last = dict(self._last)
        now = time.monotonic()
        out = {}
        for reporter, (at, report) in last.items():
            endpoints = [e.get("address") for c in report.get("clusters", []) if c.get("name") == cluster
                         for e in c.get("endpoints", [])]
            out[reporter] = {"endpoints": sorted(a for a in endpoints if isinstance(a, str)),
                             "report_age_s": round(now - at, 2)}
        return out
