//! The state the workers of this Envoy share: one `SharedStore` for the whole process (Envoy loads
//! a module file once, so every worker and every filter config of it sees the same memory), as
//! proxy-wasm's shared data is one per proxy.

use std::sync::{LazyLock, Mutex, MutexGuard};
use tailweight_sidecar::shared_store::SharedStore;

static STORE: LazyLock<Mutex<SharedStore>> = LazyLock::new(Mutex::default);

/// The store; a lock poisoned by a panic elsewhere still holds a consistent map (every write is one
/// insert), so it is used on.
fn store() -> MutexGuard<'static, SharedStore> {
    STORE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn get(key: &str) -> (Option<Vec<u8>>, Option<u32>) {
    store().get(key)
}

pub fn set(key: &str, value: &[u8], cas: Option<u32>) -> bool {
    store().set(key, value, cas)
}
