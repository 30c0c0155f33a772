"""The price list of Envoy's Wasm ABI, for section 6 of `make bench-overhead`: tiny modules in the
WebAssembly text format, assembled with binaryen's wasm-as (installed with wasm-opt), each doing one
thing on every request so that callgrind's count per request, minus a baseline's, is its cost:

- wasm_no_callbacks: a filter that exports no per-request callback (what Envoy's per-stream Wasm
  context costs alone);
- wasm_1_callback / wasm_5_callbacks: on_request_headers alone / also on_context_create,
  on_response_headers, on_log, on_delete, each returning at once (a VM entry's cost);
- then on_request_headers making 10 calls of one host function: a header read that finds the
  header (the value comes back in memory the host allocates through a call into the VM), one that
  does not, a property read (`xds.cluster_name`), a header write, the clock, a counter increment.

Every value the host returns goes to one scratch buffer (proxy_on_memory_allocate hands out the
same address each time)."""
import subprocess
from pathlib import Path

CALLS = 10
_HEAD = """(module
  (import "env" "proxy_get_header_map_value" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property" (func $property (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_replace_header_map_value" (func $set (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_current_time_nanoseconds" (func $now (param i32) (result i32)))
  (import "env" "proxy_define_metric" (func $define (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $increment (param i32 i64) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) ":path")
  (data (i32.const 32) "x-absent")
  (data (i32.const 48) "xds\\00cluster_name")
  (data (i32.const 96) "probe.counter")
  (func (export "_initialize"))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param i32) (result i32) (i32.const 4096))
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $define (i32.const 0) (i32.const 96) (i32.const 13) (i32.const 200)))
    (i32.const 1))
"""
_CALL = {
    "header_read": "(drop (call $get (i32.const 0) (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 72)))",
    "header_read_absent": "(drop (call $get (i32.const 0) (i32.const 32) (i32.const 8) (i32.const 64) (i32.const 72)))",
    "property_read": "(drop (call $property (i32.const 48) (i32.const 16) (i32.const 64) (i32.const 72)))",
    "header_write": "(drop (call $set (i32.const 0) (i32.const 32) (i32.const 8) (i32.const 16) (i32.const 5)))",
    "clock": "(drop (call $now (i32.const 64)))",
    "counter_increment": "(drop (call $increment (i32.load (i32.const 200)) (i64.const 1)))",
}
_EMPTY_CALLBACKS = """  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_log") (param i32))
  (func (export "proxy_on_delete") (param i32))
"""
NO_CALLBACKS, ONE_CALLBACK, FIVE_CALLBACKS = "wasm_no_callbacks", "wasm_1_callback", "wasm_5_callbacks"


def text(name: str) -> str:
    """The module `name` (see the module doc) in the text format."""
    if name == NO_CALLBACKS:
        return _HEAD + ")\n"
    body = "" if name in (ONE_CALLBACK, FIVE_CALLBACKS) else ("    " + _CALL[name] + "\n") * CALLS
    request = ('  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)\n'
               f"{body}    (i32.const 0))\n")
    return _HEAD + request + (_EMPTY_CALLBACKS if name == FIVE_CALLBACKS else "") + ")\n"


def names() -> list[str]:
    return [NO_CALLBACKS, ONE_CALLBACK, FIVE_CALLBACKS, *_CALL]


def build(out_dir: Path) -> dict[str, Path]:
    """Assemble every probe into `out_dir`; name -> module path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    modules = {}
    for name in names():
        wat, wasm = out_dir / f"{name}.wat", out_dir / f"{name}.wasm"
        wat.write_text(text(name))
        subprocess.run(["wasm-as", str(wat), "-o", str(wasm)], check=True, capture_output=True, timeout=60)
        modules[name] = wasm
    return modules


def price_list(per_request: dict[str, float]) -> dict[str, float]:
    """Instructions per callback entry and per host call, from the probes' instructions per request:
    the per-stream context (no callbacks over no_wasm), a VM entry (the 1-callback probe over none;
    the 4 further entries of the 5-callback probe each), and each host call ((probe - 1 callback) /
    CALLS)."""
    out = {}
    if NO_CALLBACKS in per_request and "no_wasm" in per_request:
        out["Wasm context per stream"] = per_request[NO_CALLBACKS] - per_request["no_wasm"]
    if ONE_CALLBACK in per_request and FIVE_CALLBACKS in per_request:
        out["callback entry (each of 4 more)"] = (per_request[FIVE_CALLBACKS] - per_request[ONE_CALLBACK]) / 4
    for call in _CALL:
        if call in per_request and ONE_CALLBACK in per_request:
            out[call] = (per_request[call] - per_request[ONE_CALLBACK]) / CALLS
    return out
