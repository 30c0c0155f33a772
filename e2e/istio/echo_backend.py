"""A tiny HTTP backend for the Istio tests: answers every GET with its name and address.

Usage: python echo_backend.py NAME IP PORT
Response headers: x-backend (NAME), x-backend-address (IP:PORT), and x-echo-override: the
x-gateway-destination-endpoint request header as it arrived (empty if none), so a test can check
that a steered request was served by the endpoint the filter named.
"""
import http.server
import sys

name, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
OVERRIDE_HEADER = "x-gateway-destination-endpoint"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Envoy's upstream connections expect

    def do_GET(self):
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


http.server.ThreadingHTTPServer((ip, port), Handler).serve_forever()
