//! Header maps as the host reads them (proxy-wasm's serialised pairs), for the calls the filter
//! makes to the aggregator. Host-free.

/// The pair count, each pair's name and value lengths (all little-endian u32), then each name and
/// value followed by a NUL.
pub fn serialize_pairs(pairs: &[(&str, &str)]) -> Vec<u8> {
    let size = 4 + pairs.iter().map(|(n, v)| 10 + n.len() + v.len()).sum::<usize>();
    let mut bytes = Vec::with_capacity(size);
    bytes.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (name, value) in pairs {
        bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    for (name, value) in pairs {
        for part in [name, value] {
            bytes.extend_from_slice(part.as_bytes());
            bytes.push(0);
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_counted_sized_then_spelt_out_with_nuls() {
        assert_eq!(serialize_pairs(&[]), [0, 0, 0, 0]);
        let bytes = serialize_pairs(&[(":path", "/v1/report"), ("x", "")]);
        let mut expected = vec![2, 0, 0, 0, 5, 0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        expected.extend_from_slice(b":path\0/v1/report\0x\0\0");
        assert_eq!(bytes, expected);
        assert_eq!(bytes.len(), bytes.capacity(), "sized exactly up front");
    }
}
