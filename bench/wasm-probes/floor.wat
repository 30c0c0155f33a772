;; The least any Wasm filter that steers by override_host and learns from outcomes pays per request,
;; for `make bench-overhead` (sections 5 and 6): two callbacks and the host calls such a filter
;; cannot do without, and nothing else. on_request_headers reads the route's cluster
;; (xds.cluster_name), the clock, and writes the override header (an address no cluster has, so
;; Envoy's override_host falls back to its LB: measured to cost the same as a valid one);
;; on_log reads who served (upstream.address), the status (response.code) and the clock. The
;; values are dropped; every value the host returns is written at one scratch address (the host
;; allocates through proxy_on_memory_allocate, which hands out the same buffer each time).
;; No proxy_on_context_create or proxy_on_delete: the host skips callbacks a module does not export.
(module
  (import "env" "proxy_get_property" (func $property (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_current_time_nanoseconds" (func $now (param i32) (result i32)))
  (import "env" "proxy_replace_header_map_value" (func $set_header (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "x-gateway-destination-endpoint")
  (data (i32.const 48) "xds\00cluster_name")
  (data (i32.const 80) "upstream\00address")
  (data (i32.const 112) "response\00code")
  (data (i32.const 128) "127.0.0.1:9")
  (func (export "_initialize"))
  (func (export "proxy_abi_version_0_2_1"))
  ;; Values up to 60 KiB fit the scratch buffer (the values read here are a few bytes).
  (func (export "proxy_on_memory_allocate") (param $size i32) (result i32) (i32.const 4096))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $property (i32.const 48) (i32.const 16) (i32.const 64) (i32.const 72)))
    (drop (call $now (i32.const 64)))
    (drop (call $set_header (i32.const 0) (i32.const 16) (i32.const 30) (i32.const 128) (i32.const 11)))
    (i32.const 0))
  (func (export "proxy_on_log") (param i32)
    (drop (call $property (i32.const 80) (i32.const 16) (i32.const 64) (i32.const 72)))
    (drop (call $property (i32.const 112) (i32.const 13) (i32.const 64) (i32.const 72)))
    (drop (call $now (i32.const 64))))
)
