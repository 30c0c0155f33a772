"""A plain HTTP file server for the Istio tests (pilot-agent downloads a Wasm module from it).

Usage: python file_server.py DIRECTORY IP READY_FILE
Serves DIRECTORY on IP, a port of the kernel's choosing, reported in READY_FILE ({"port": P}).
(`python -m http.server 0` only prints the port it got; the harness reads ready files.)
"""
import functools
import http.server
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # e2e/, for the shared helpers
from tailweight_e2e.procs import serve_forever  # noqa: E402

directory, ip, ready_file = sys.argv[1], sys.argv[2], sys.argv[3]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
serve_forever(http.server.ThreadingHTTPServer((ip, 0), handler), ready_file)
