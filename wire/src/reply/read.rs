//! The filter's reply reader: JSON into `Reply` by hand with `json` and `fields` instead of serde,
//! for the size of the sidecar's module (see `json`), then `Reply::validate`. A bad reply is
//! ignored, never used. The aggregator writes replies with `reply::write`; a round-trip test holds
//! the two to each other.

use super::{ClusterView, EndpointView, Reply};
use crate::fields::{FieldError, Fields};
use crate::json::{self, JsonError, Value};
use crate::protocol::Limits;
use crate::validate::Invalid;

/// Why a reply was not used; displays as one line naming the problem (and the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    NotUtf8,
    /// Not JSON: the parser's reason.
    NotJson(JsonError),
    /// JSON, but not shaped like a reply: the first field that is not what it should be.
    NotAReply(FieldError),
    /// A reply, refused: a version this side does not speak, or a bad field.
    Invalid(Invalid),
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Pieces rather than `write!`: each formatting site is code in the filter's module.
        match self {
            ReplyError::NotUtf8 => f.write_str("malformed reply: not UTF-8"),
            ReplyError::NotJson(e) => {
                f.write_str("malformed reply: ")?;
                e.fmt(f)
            }
            ReplyError::NotAReply(e) => {
                f.write_str("malformed reply: ")?;
                e.fmt(f)
            }
            ReplyError::Invalid(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReplyError {}

/// Parse and validate a reply. Unknown fields are ignored (additions within v1).
pub fn read_reply(body: &[u8], limits: &Limits) -> Result<Reply, ReplyError> {
    let text = std::str::from_utf8(body).map_err(|_| ReplyError::NotUtf8)?;
    let value = json::parse(text).map_err(ReplyError::NotJson)?;
    let reply = reply_of(&value).map_err(ReplyError::NotAReply)?;
    reply.validate(limits).map_err(ReplyError::Invalid)?;
    Ok(reply)
}

fn reply_of(value: &Value) -> Result<Reply, FieldError> {
    // Each object's fields are read, then its first bad field reported (see `Fields`), before the
    // objects inside it: the error is the first in the order of the text.
    let mut f = Fields::new("", members(value, "reply")?);
    let version = u32_field(&mut f, "version");
    let ttl_ms = u32_field(&mut f, "ttl_ms");
    let cluster_values = required_array(&mut f, "clusters");
    f.finish()?;
    // Loops rather than collecting Results: each collect is its own iterator code in the module.
    let mut clusters = Vec::with_capacity(cluster_values.len());
    for (ci, c) in cluster_values.iter().enumerate() {
        // One text for the object's name and its fields' prefix (formatted per object read).
        let prefix = format!("clusters[{ci}].");
        let object = members(c, prefix.strip_suffix('.').unwrap_or_default())?;
        let mut f = Fields::new(prefix, object);
        let name = f.required_string("name", usize::MAX);
        let reporters = optional_u32(&mut f, "reporters");
        let endpoint_values = required_array(&mut f, "endpoints");
        f.finish()?;
        let mut endpoints = Vec::with_capacity(endpoint_values.len());
        for (ei, e) in endpoint_values.iter().enumerate() {
            let prefix = format!("clusters[{ci}].endpoints[{ei}].");
            let object = members(e, prefix.strip_suffix('.').unwrap_or_default())?;
            let mut f = Fields::new(prefix, object);
            endpoints.push(EndpointView {
                address: f.required_string("address", usize::MAX),
                weight: number_field(&mut f, "weight"),
                inflight: number_field(&mut f, "inflight"),
                peer_inflight: number_field(&mut f, "peer_inflight"),
                latency_us: u64_field(&mut f, "latency_us"),
                cpu: f.get("cpu").and_then(|v| number_of(&mut f, "cpu", v)),
                ejected: f.boolean("ejected", false),
                served_age_ms: optional_u64(&mut f, "served_age_ms"),
            });
            f.finish()?;
        }
        clusters.push(ClusterView { name, reporters, endpoints });
    }
    Ok(Reply { version, ttl_ms, clusters })
}

fn members<'a>(value: &'a Value, what: &str) -> Result<&'a [(String, Value)], FieldError> {
    match value {
        Value::Object(members) => Ok(members),
        other => {
            Err(FieldError { field: what.to_string(), problem: format!("expected an object, got {}", other.kind()) })
        }
    }
}

// The readers below note a bad or missing field in `f` and read it as 0 (or nothing).

fn required<'a>(f: &mut Fields<'a>, key: &'static str) -> Option<&'a Value> {
    let value = f.get(key);
    if value.is_none() {
        f.fail(f.error(key, "required".into()));
    }
    value
}

fn required_array<'a>(f: &mut Fields<'a>, key: &'static str) -> &'a [Value] {
    let items = f.array(key);
    if items.is_none() {
        // Present but not an array: that error was noted first and stays.
        f.fail(f.error(key, "required".into()));
    }
    items.unwrap_or_default()
}

fn u64_field(f: &mut Fields, key: &'static str) -> u64 {
    let Some(v) = required(f, key) else { return 0 };
    v.as_u64().unwrap_or_else(|| {
        f.fail(f.unexpected(key, "a non-negative integer", v));
        0
    })
}

fn optional_u64(f: &mut Fields, key: &'static str) -> Option<u64> {
    let v = f.get(key)?;
    let n = v.as_u64();
    if n.is_none() {
        f.fail(f.unexpected(key, "a non-negative integer", v));
    }
    n
}

fn optional_u32(f: &mut Fields, key: &'static str) -> Option<u32> {
    let v = f.get(key)?;
    let n = v.as_u64().and_then(|n| u32::try_from(n).ok());
    if n.is_none() {
        f.fail(f.unexpected(key, "an integer in 0..=4294967295", v));
    }
    n
}

fn u32_field(f: &mut Fields, key: &'static str) -> u32 {
    let Some(v) = required(f, key) else { return 0 };
    v.as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or_else(|| {
        f.fail(f.unexpected(key, "an integer in 0..=4294967295", v));
        0
    })
}

fn number_field(f: &mut Fields, key: &'static str) -> f64 {
    required(f, key).and_then(|v| number_of(f, key, v)).unwrap_or(0.0)
}

fn number_of(f: &mut Fields, key: &'static str, v: &Value) -> Option<f64> {
    let number = v.as_f64();
    if number.is_none() {
        f.fail(f.unexpected(key, "a number", v));
    }
    number
}
