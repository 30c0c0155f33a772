//! Calls out through the filter config: started on the main thread (ticks and answers run there),
//! answered there by `on_http_filter_config_http_callout_done` with Envoy's callout id, which names
//! the worker whose plugin made the call.

use crate::abi::{self, HeaderPair, ModuleBuffer};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use tailweight_sidecar::host::{CallToken, OutgoingCall};

/// Envoy's refusals (`envoy_dynamic_module_type_http_callout_init_result`), as words.
fn refusal(result: u32) -> &'static str {
    match result {
        1 => "MissingRequiredHeaders",
        2 => "ClusterNotFound",
        3 => "DuplicateCalloutId",
        4 => "CannotCreateRequest",
        _ => "Refused",
    }
}

#[derive(Default)]
pub struct Callouts {
    /// Envoy's callout id -> the worker waiting for its answer.
    waiting: Mutex<HashMap<u64, usize>>,
}

impl Callouts {
    /// The token is Envoy's callout id, truncated (ids count up from 1).
    pub fn start(
        &self,
        config_envoy: *mut c_void,
        worker: usize,
        call: &OutgoingCall,
    ) -> Result<CallToken, &'static str> {
        let mut headers: Vec<HeaderPair> = call.headers.iter().map(|(k, v)| pair(k, v)).collect();
        // Envoy's callout requires a `host`; the sidecar names the authority as proxy-wasm does.
        if let Some((_, authority)) = call.headers.iter().find(|(k, _)| *k == ":authority") {
            if !call.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
                headers.push(pair("host", authority));
            }
        }
        let mut id = 0u64;
        // SAFETY: Envoy reads the buffers during the call and writes one id.
        let result = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_http_callout(
                config_envoy,
                &mut id,
                ModuleBuffer::of(call.cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                ModuleBuffer::of(call.body),
                call.timeout_ms,
            )
        };
        if result != abi::RESULT_SUCCESS {
            return Err(refusal(result));
        }
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(id, worker);
        Ok(id as CallToken)
    }

    /// The worker that waits for callout `id`, and its token (None: not ours, or answered already).
    pub fn answered(&self, id: u64) -> Option<(usize, CallToken)> {
        let worker = self.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id)?;
        Some((worker, id as CallToken))
    }
}

fn pair(key: &str, value: &str) -> HeaderPair {
    HeaderPair { key: key.as_ptr(), key_len: key.len(), value: value.as_ptr(), value_len: value.len() }
}
