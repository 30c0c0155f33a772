"""A tiny HTTP backend for the Istio tests: answers every GET with its name and address.

Usage: python echo_backend.py NAME IP READY_FILE
Binds IP, a port of the kernel's choosing, and reports it in READY_FILE ({"port": P}).
Response headers: x-backend (NAME), x-backend-address (IP:PORT), and x-echo-override: the
x-gateway-destination-endpoint request header as it arrived (empty if none), so a test can check
that a steered request was served by the endpoint the filter named.
"""
import http.server
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # e2e/, for the shared helpers
from tailweight_e2e.procs import serve_forever  # noqa: E402

name, ip, ready_file = sys.argv[1], sys.argv[2], sys.argv[3]
OVERRIDE_HEADER = "x-gateway-destination-endpoint"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Envoy's upstream connections expect

    def do_GET(self):
        port = self.server.server_address[1]
        body = f"{name} {ip}:{port}\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.send_header("x-backend", name)
        self.send_header("x-backend-address", f"{ip}:{port}")
        self.send_header("x-echo-override", self.headers.get(OVERRIDE_HEADER, ""))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet: tests read headers, not logs
        pass


serve_forever(http.server.ThreadingHTTPServer((ip, 0), Handler), ready_file)
