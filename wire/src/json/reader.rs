//! JSON read as it comes (a pull reader), for texts whose size the reader does not choose: the
//! aggregator's replies. The caller walks the objects and arrays it knows and takes each value it
//! wants, and everything else is checked and passed over without being kept, so what a text costs
//! is what the caller keeps of it, not a tree of the whole text (`parse`: ~20 to 40 bytes of tree
//! per byte of text for arrays of small numbers). The same grammar as `parse` (one parser): a text
//! `parse` refuses is refused here with the same error, at the same place.

use super::parse::Parser;
use super::value::JsonError;

pub struct Reader<'a> {
    p: Parser<'a>,
}

/// What kind of value the JSON value `text` is ("a string", "an object"...).
pub fn kind(text: &str) -> &'static str {
    match text.as_bytes().first() {
        Some(b'n') => "null",
        Some(b't' | b'f') => "a boolean",
        Some(b'"') => "a string",
        Some(b'[') => "an array",
        Some(b'{') => "an object",
        _ => "a number",
    }
}

impl<'a> Reader<'a> {
    /// At the first value of `text`.
    pub fn new(text: &'a str) -> Self {
        Reader { p: Parser::new(text) }
    }

    /// The value here starts with `bracket`.
    pub fn at(&self, bracket: u8) -> bool {
        self.p.peek() == Some(bracket)
    }

    /// Into the array or object here, at nesting depth `depth` (the document is at 0).
    pub fn enter(&mut self, depth: usize) -> Result<(), JsonError> {
        self.p.enter(depth)
    }

    /// Whether the array entered has another item, then the reader is at it (`first`: true
    /// before the first item).
    pub fn next_item(&mut self, first: &mut bool) -> Result<bool, JsonError> {
        self.p.next_item(first)
    }

    /// Whether the object entered has another member, then its key is in `key` and the reader at
    /// its value.
    pub fn next_key(&mut self, first: &mut bool, key: &mut String) -> Result<bool, JsonError> {
        self.p.next_key(first, key)
    }

    /// The text of the value here (at nesting depth `depth`), checked.
    pub fn value_text(&mut self, depth: usize) -> Result<&'a str, JsonError> {
        self.p.skipped(depth)
    }

    /// Check the value here and pass over it.
    pub fn skip(&mut self, depth: usize) -> Result<(), JsonError> {
        self.p.skip(depth)
    }

    /// After the document's value: nothing but whitespace is left.
    pub fn finish(mut self) -> Result<(), JsonError> {
        self.p.end()
    }
}
