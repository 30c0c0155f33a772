//! What this crate's property tests generate messages with.

/// Names a generated message carries: the characters JSON escapes among ordinary ones.
pub const NAME: &str = "[a-z|.\"\\\\é 0-9]{1,40}";

/// Endpoint `at`'s address, `10.x.y.z:80`.
pub fn address(at: u32) -> String {
    format!("10.{}.{}.{}:80", at >> 16, (at >> 8) & 255, at & 255)
}

/// `items` sorted by `key`, only the first of each key kept (as a valid message's clusters and
/// each cluster's endpoints must be).
pub fn unique_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<T> {
    items.sort_by(|a, b| key(a).cmp(key(b)));
    items.dedup_by(|a, b| key(a) == key(b));
    items
}
