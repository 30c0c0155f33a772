"""A recording relay between an aggregator replica's sidecar and the aggregator, for the tests.

Usage: python report_recorder.py LISTEN_IP UPSTREAM_PORT RECORD_FILE READY_FILE
Listens on LISTEN_IP, a port of the kernel's choosing, reported in READY_FILE ({"port": P}).
Forwards every request to 127.0.0.1:UPSTREAM_PORT unchanged and appends one JSON line per POST to
RECORD_FILE: the Host (:authority), x-tailweight-shard and x-forwarded-client-cert headers, the
report's reporter and cluster names, and the upstream status. This is the plaintext hop inside the pod (sidecar -> app),
so the test sees what the mesh delivered without touching the mTLS leg.
"""
import http.client
import http.server
import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # e2e/, for the shared helpers
from tailweight_e2e.procs import serve_forever  # noqa: E402

listen_ip, upstream_port, record_file, ready_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


class Relay(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def relay(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=10)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
            status, reply_headers = response.status, response.getheaders()
        except OSError as e:
            status, payload, reply_headers = 502, f"relay: {e}\n".encode(), []
        finally:
            upstream.close()
        if self.command == "POST":
            self.record(body, status)
        self.send_response(status)
        for k, v in reply_headers:
            if k.lower() not in HOP_BY_HOP | {"content-length"}:
                self.send_header(k, v)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def record(self, body: bytes, status: int):
        try:
            report = json.loads(body)
            reporter = report.get("reporter")
            clusters = [c.get("name") for c in report.get("clusters", [])]
        except (ValueError, AttributeError, TypeError):
            reporter, clusters = None, []
        line = json.dumps({"path": self.path, "host": self.headers.get("host"),
                           "shard": self.headers.get("x-tailweight-shard"),
                           "xfcc": self.headers.get("x-forwarded-client-cert"),
                           "reporter": reporter, "clusters": clusters, "status": status})
        with lock, open(record_file, "a") as f:
            f.write(line + "\n")

    do_GET = do_POST = relay

    def log_message(self, *args):
        pass


serve_forever(http.server.ThreadingHTTPServer((listen_ip, 0), Relay), ready_file)
