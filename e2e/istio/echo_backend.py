"""A tiny HTTP backend for the Istio tests: answers every GET with its name and address.

Usage: python echo_backend.py NAME IP READY_FILE
Binds IP, a port of the kernel's choosing, and reports it in READY_FILE ({"port": P}).
Response headers: x-backend (NAME), x-backend-address (IP:PORT), and x-echo-override: the
x-gateway-destination-endpoint request header as it arrived (empty if none), so a test can check
that a steered request was served by the endpoint the filter named.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # e2e/, for the shared helpers
from tailweight_e2e.procs import serve_forever  # noqa: E402
from tailweight_e2e.stub_server import Reply, Request, StubServer  # noqa: E402

name, ip, ready_file = sys.argv[1], sys.argv[2], sys.argv[3]
OVERRIDE_HEADER = "x-gateway-destination-endpoint"


def echo(request: Request) -> Reply:
    address = f"{ip}:{server.port}"
    return Reply(200, f"{name} {address}\n".encode(),
                 (("content-type", "text/plain"), ("x-backend", name), ("x-backend-address", address),
                  ("x-echo-override", request.headers.get(OVERRIDE_HEADER, ""))))


# keep-alive, as Envoy's upstream connections expect
server = StubServer(echo, keep_alive=True, name=f"backend-{name}", host=ip)
serve_forever(server.server, ready_file)
