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

from tailweight_e2e.stub_server import Reply, Request, StubServer

# Request headers worth passing on (the shard header lets aggregator replicas shard by cluster).
_FORWARDED = ("content-type", "x-tailweight-shard")


class ReportTap:
    def __init__(self, upstream_port: int, timeout_s: float = 5.0):
        self.upstream_port = upstream_port
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, dict]] = {}  # reporter -> (monotonic time, report)
        # Keep-alive: Envoy reuses its connection.
        self.server = StubServer(self._pass_on, keep_alive=True, name="report-tap")
        self.port = self.server.port

    def start(self) -> "ReportTap":
        self.server.start()
        return self

    def _pass_on(self, request: Request) -> Reply:
        self._note(request.body)
        status, content_type, reply = self._forward(request.method, request.path, request.body, request.headers)
        return Reply(status, reply, [("content-type", content_type)])

    def forward_to(self, upstream_port: int) -> None:
        """Send what comes next to an aggregator on another port (one restarted on port 0), as a
        Service address stays the same while the pod behind it is replaced."""
        self.upstream_port = upstream_port

    def stop(self) -> None:
        self.server.close()

    def _note(self, body: bytes) -> None:
        try:
            report = json.loads(body)
            reporter = str(report["reporter"])
        except (ValueError, KeyError, TypeError):
            return  # not a report: the aggregator answers it as it sees fit
        with self._lock:
            self._last[reporter] = (time.monotonic(), report)

    def _forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        """The aggregator's reply; 503 when it cannot be reached (as Envoy answers for a dead upstream)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=self.timeout_s)
        try:
            conn.request(method, path, body, {h: headers[h] for h in _FORWARDED if headers.get(h)})
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
