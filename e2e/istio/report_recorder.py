"""A recording relay between an aggregator replica's sidecar and the aggregator, for the tests.

Usage: python report_recorder.py LISTEN_IP UPSTREAM_PORT RECORD_FILE READY_FILE
Listens on LISTEN_IP, a port of the kernel's choosing, reported in READY_FILE ({"port": P}).
Forwards every request to 127.0.0.1:UPSTREAM_PORT unchanged and appends one JSON line per POST to
RECORD_FILE: the Host (:authority), x-tailweight-shard, x-forwarded-client-cert and
x-tailweight-sender-address (the caller's address, written by the aggregator's sidecar) headers, the
report's reporter and cluster names (an attestation's cluster, endpoint and {principal: requests}
of its sources), and the upstream status. This is the plaintext hop inside the
pod (sidecar -> app), so the test sees what the mesh delivered without touching the mTLS leg.
"""
import http.client
import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # e2e/, for the shared helpers
from tailweight_e2e.procs import serve_forever  # noqa: E402
from tailweight_e2e.stub_server import Reply, Request, StubServer  # noqa: E402

listen_ip, upstream_port, record_file, ready_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


def relay(request: Request) -> Reply:
    upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=10)
    try:
        headers = {k: v for k, v in request.headers.items() if k not in HOP_BY_HOP}
        upstream.request(request.method, request.path, body=request.body, headers=headers)
        response = upstream.getresponse()
        payload = response.read()
        status, reply_headers = response.status, response.getheaders()
    except OSError as e:
        status, payload, reply_headers = 502, f"relay: {e}\n".encode(), []
    finally:
        upstream.close()
    if request.method == "POST":
        record(request, status)
    kept = tuple((k, v) for k, v in reply_headers if k.lower() not in HOP_BY_HOP | {"content-length"})
    return Reply(status, payload, kept)


def record(request: Request, status: int) -> None:
    attested = {}
    try:
        body = json.loads(request.body)
        if "sources" in body:  # an attestation (/v1/attest)
            reporter, clusters = None, [body.get("cluster")]
            attested = {"endpoint": body.get("endpoint"),
                        "sources": {s.get("principal"): s.get("requests") for s in body.get("sources", [])}}
        else:
            reporter, clusters = body.get("reporter"), [c.get("name") for c in body.get("clusters", [])]
    except (ValueError, AttributeError, TypeError):
        reporter, clusters = None, []
    line = json.dumps({"path": request.path, "host": request.headers.get("host"),
                       "shard": request.headers.get("x-tailweight-shard"),
                       "xfcc": request.headers.get("x-forwarded-client-cert"),
                       "sender": request.headers.get("x-tailweight-sender-address"),
                       "reporter": reporter, "clusters": clusters, "status": status, **attested})
    with lock, open(record_file, "a") as f:
        f.write(line + "\n")


server = StubServer(relay, keep_alive=True, name="report-relay", host=listen_ip)
serve_forever(server.server, ready_file)
