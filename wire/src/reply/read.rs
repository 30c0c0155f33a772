//! The filter's reply reader: JSON into `Reply` as it comes (`json::Reader`), without serde (for
//! the size of the sidecar's module, see `json`) and without a tree of the whole text, then
//! `Reply::validate`. A bad reply is ignored, never used. The aggregator writes replies with
//! `reply::write`; a round-trip test holds the two to each other.
//!
//! What a reply costs the filter is bounded by what it keeps, not by its size: of each object,
//! the members it knows (a few scalars, read with `Fields` as the filter's configuration is);
//! at most `Limits::max_clusters` clusters of at most `max_endpoints_per_cluster` endpoints each
//! (those beyond are counted, not kept, and refused by the validation as before); everything
//! else is checked and passed over. tests/reply_memory.rs measures it: replies of 4 MiB built to
//! cost the most take at most 1.6x their size (a tree of the whole text took up to 56x).
//!
//! A bad reply gets the error reading a whole tree gave: a text that is not JSON anywhere is
//! `NotJson`; else the first bad field, an object's own fields before the objects inside it, and
//! those in the order of the text; else the validation's. One difference: a member that should be
//! a scalar but is an array or object of over 60 bytes is quoted as `[]` or `{}` (a tree quoted it
//! whole, up to the reply's 4 MiB in one log line).

use super::{ClusterView, EndpointView, Reply};
use crate::fields::{FieldError, Fields};
use crate::json::{self, JsonError, Reader, Value};
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
    let mut r = Reader::new(text);
    let read = document(&mut r, limits).map_err(ReplyError::NotJson)?;
    r.finish().map_err(ReplyError::NotJson)?;
    let (reply, clusters, endpoints) = read.map_err(ReplyError::NotAReply)?;
    reply.validate_counted(limits, clusters, &endpoints).map_err(ReplyError::Invalid)?;
    Ok(reply)
}

/// A value read in full: a JSON error, or what was read or its first bad field.
type Parsed<T> = Result<Result<T, FieldError>, JsonError>;

// Nesting depths of the objects read (the document's is 0); their fields are one deeper.
const CLUSTER: usize = 2;
const ENDPOINT: usize = 4;

/// The reply, how many clusters the text had, and how many endpoints each one kept had.
fn document(r: &mut Reader, limits: &Limits) -> Parsed<(Reply, usize, Vec<usize>)> {
    let mut clusters = List::new();
    let members = object(r, 0, &["version", "ttl_ms"], "clusters", &mut |r| {
        clusters.read(r, 1, limits.max_clusters, |r, ci| cluster(r, ci, limits))
    })?;
    Ok((|| {
        // Each object's fields are read, then its first bad field reported (see `Fields`), before
        // the objects inside it: the error is the first in the order of the text.
        let members = members.map_err(|kind| not_an_object("reply".into(), kind))?;
        let mut f = Fields::new("", &members);
        let version = u32_field(&mut f, "version");
        let ttl_ms = u32_field(&mut f, "ttl_ms");
        required_array(&mut f, "clusters");
        f.finish()?;
        let (clusters, count) = clusters.items()?;
        let (clusters, endpoints) = clusters.into_iter().unzip();
        Ok((Reply { version, ttl_ms, clusters }, count, endpoints))
    })())
}

/// Cluster `ci`, and how many endpoints it had.
fn cluster(r: &mut Reader, ci: usize, limits: &Limits) -> Parsed<(ClusterView, usize)> {
    let mut endpoints = List::new();
    let cap = limits.max_endpoints_per_cluster;
    let members = object(r, CLUSTER, &["name", "reporters"], "endpoints", &mut |r| {
        endpoints.read(r, CLUSTER + 1, cap, |r, ei| endpoint(r, ci, ei))
    })?;
    Ok((|| {
        let mut members = members.map_err(|kind| not_an_object(format!("clusters[{ci}]"), kind))?;
        let mut f = Fields::new(format!("clusters[{ci}]."), &members);
        f.checked_required_string("name", usize::MAX);
        let reporters = optional_u32(&mut f, "reporters");
        required_array(&mut f, "endpoints");
        f.finish()?;
        let name = taken_string(&mut members, "name");
        let (endpoints, count) = endpoints.items()?;
        Ok((ClusterView { name, reporters, endpoints }, count))
    })())
}

fn endpoint(r: &mut Reader, ci: usize, ei: usize) -> Parsed<EndpointView> {
    const FIELDS: [&str; 8] =
        ["address", "weight", "inflight", "peer_inflight", "latency_us", "cpu", "ejected", "served_age_ms"];
    let members = object(r, ENDPOINT, &FIELDS, "", &mut |_| Ok(()))?;
    Ok((|| {
        let mut members = members.map_err(|kind| not_an_object(format!("clusters[{ci}].endpoints[{ei}]"), kind))?;
        let mut f = Fields::new(format!("clusters[{ci}].endpoints[{ei}]."), &members);
        f.checked_required_string("address", usize::MAX);
        let endpoint = EndpointView {
            address: String::new(),
            weight: number_field(&mut f, "weight"),
            inflight: number_field(&mut f, "inflight"),
            peer_inflight: number_field(&mut f, "peer_inflight"),
            latency_us: u64_field(&mut f, "latency_us"),
            cpu: f.get("cpu").and_then(|v| number_of(&mut f, "cpu", v)),
            ejected: f.boolean("ejected", false),
            served_age_ms: optional_u64(&mut f, "served_age_ms"),
        };
        f.finish()?;
        Ok(EndpointView { address: taken_string(&mut members, "address"), ..endpoint })
    })())
}

/// The string a checked field holds, taken out of its object (not copied: it may be as long as
/// the reply).
fn taken_string(members: &mut [(String, Value)], key: &str) -> String {
    match members.iter_mut().find(|(k, _)| k == key) {
        Some((_, Value::String(s))) => std::mem::take(s),
        _ => String::new(),
    }
}

fn not_an_object(field: String, kind: &str) -> FieldError {
    FieldError { field, problem: format!("expected an object, got {kind}") }
}

/// The items of an array kept (at most a cap), how many it had, and the first bad one.
struct List<T> {
    kept: Vec<T>,
    count: usize,
    error: Option<FieldError>,
}

impl<T> List<T> {
    fn new() -> Self {
        List { kept: Vec::new(), count: 0, error: None }
    }

    /// The items of the array here (at `depth`), each read by `item` (given its index), at most
    /// `cap` kept, none read after a bad one (the array is refused then).
    fn read(
        &mut self,
        r: &mut Reader,
        depth: usize,
        cap: usize,
        mut item: impl FnMut(&mut Reader, usize) -> Parsed<T>,
    ) -> Result<(), JsonError> {
        let mut first = true;
        r.enter(depth)?;
        while r.next_item(&mut first)? {
            if self.error.is_some() {
                // The array is refused: the rest is only checked (a later JSON error still wins).
                r.skip(depth + 1)?;
            } else {
                match item(r, self.count)? {
                    Ok(x) if self.kept.len() < cap => self.kept.push(x),
                    Ok(_) => {}
                    Err(e) => self.error = Some(e),
                }
            }
            self.count += 1;
        }
        // A cluster's endpoints are kept for as long as the reply: without the growth's spare room.
        self.kept.shrink_to_fit();
        Ok(())
    }

    /// The items and their count, or the first bad one's error.
    fn items(self) -> Result<(Vec<T>, usize), FieldError> {
        self.error.map_or(Ok((self.kept, self.count)), Err)
    }
}

/// An object's members as `Fields` reads them, or the kind of value there instead.
type Members = Result<Vec<(String, Value)>, &'static str>;

/// The object here as the members `Fields` reads: the first occurrence of each of `keys`, and of
/// the array field `array` (read by `list` when it is an array, then an empty array stands for
/// it); the rest checked and passed over. Err: not an object, what kind of value is there instead.
///
/// A member's value is parsed as a tree only when it is a scalar or at most 60 bytes of text (an
/// array or object is never what a field wants): a longer one stands as an empty one (its
/// message then says `got []`), so a field costs at most its own text.
fn object<'a>(
    r: &mut Reader<'a>,
    depth: usize,
    keys: &[&str],
    array: &str,
    list: &mut dyn FnMut(&mut Reader<'a>) -> Result<(), JsonError>,
) -> Result<Members, JsonError> {
    if !r.at(b'{') {
        return Ok(Err(json::kind(r.value_text(depth)?)));
    }
    let mut members: Vec<(String, Value)> = Vec::new();
    let (mut first, mut key) = (true, String::new());
    r.enter(depth)?;
    while r.next_key(&mut first, &mut key)? {
        let is_array = !array.is_empty() && key == array;
        if (!is_array && !keys.contains(&key.as_str())) || members.iter().any(|(k, _)| *k == key) {
            r.skip(depth + 1)?;
            continue;
        }
        let value = if is_array && r.at(b'[') {
            list(r)?;
            Value::Array(vec![])
        } else {
            let text = r.value_text(depth + 1)?;
            match text.as_bytes().first() {
                Some(b'[') if text.len() > 60 => Value::Array(vec![]),
                Some(b'{') if text.len() > 60 => Value::Object(vec![]),
                _ => json::parse(text).unwrap_or(Value::Null),
            }
        };
        members.push((std::mem::take(&mut key), value));
    }
    Ok(Ok(members))
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
