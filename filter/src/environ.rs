//! The VM's environment as WASI's `environ_get` writes it (Istio's `vmConfig.env`): `KEY=VALUE`
//! strings, each followed by a NUL. Host-free. The module builds for wasm32-unknown-unknown, whose
//! std has no environment, so the host glue reads it through the WASI call itself.

/// The value of `name` in an `environ_get` buffer: the first `name=...` entry; None where the
/// name is absent or its value is empty or not UTF-8.
pub fn environ_value(buffer: &[u8], name: &str) -> Option<String> {
    buffer
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
        .filter(|value| !value.is_empty())
        .and_then(|value| std::str::from_utf8(value).ok())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUFFER: &[u8] = b"POD_NAME=client-7f9\0POD_NAMESPACE=shop\0EMPTY=\0POD=x=y\0BAD=\xff\0";

    #[test]
    fn a_name_gives_its_value_and_only_a_whole_name_matches() {
        assert_eq!(environ_value(BUFFER, "POD_NAME").as_deref(), Some("client-7f9"));
        assert_eq!(environ_value(BUFFER, "POD_NAMESPACE").as_deref(), Some("shop"));
        assert_eq!(environ_value(BUFFER, "POD").as_deref(), Some("x=y"), "the first '=' ends the name");
        assert_eq!(environ_value(BUFFER, "POD_NAM"), None);
        assert_eq!(environ_value(BUFFER, "MISSING"), None);
    }

    #[test]
    fn empty_values_non_utf8_values_and_empty_buffers_give_none() {
        assert_eq!(environ_value(BUFFER, "EMPTY"), None);
        assert_eq!(environ_value(BUFFER, "BAD"), None);
        assert_eq!(environ_value(b"", "POD_NAME"), None);
        assert_eq!(environ_value(b"POD_NAME=unterminated", "POD_NAME").as_deref(), Some("unterminated"));
    }
}
