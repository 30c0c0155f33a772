//! The JSON the filter reads (its plugin configuration, the aggregator's replies, ORCA's JSON form)
//! and writes (its reports), without serde: a small value tree, a pull reader over the same parser
//! for texts whose size the filter does not choose (`Reader`: the aggregator's replies), and a
//! writer. Hand-written because
//! every sidecar pays for the filter's code size at start-up (V8 compiles the whole module before
//! the listener is ready, about 0.5 ms per KB here): serde_json with its derived (de)serializers
//! was ~170 KB of the module, miniserde's value parser 19 KB, this a few KB. The aggregator and the
//! tools keep serde_json.
//!
//! Numbers keep their text: integers are read exactly, other numbers to within a few units in the
//! last place (`parse`), and messages quote what was written. Nesting is bounded; nothing panics on
//! any input.

mod parse;
mod reader;
mod value;
mod write;

#[cfg(test)]
mod tests;

pub use parse::{number, parse, MAX_DEPTH};
pub use reader::{kind, Reader};
pub use value::{JsonError, Number, Value};
pub use write::{
    clip, escaped, number_text, quoted, write_decimal6, write_str, write_str_member, write_u64, write_u64_member,
    write_value,
};
