"""A tiny HTTP backend for the Istio tests: answers every GET with its name and address.

Usage: python echo_backend.py NAME IP PORT   (the x-backend response header carries NAME)
"""
import http.server
import sys

name, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{name} {ip}:{port}\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.send_header("x-backend", name)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet: tests read headers, not logs
        pass


http.server.ThreadingHTTPServer((ip, port), Handler).serve_forever()
