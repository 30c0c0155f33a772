//! The protobuf wire format as far as the filter reads it (ORCA's binary report, the gRPC health
//! answer): fields in order, each a key varint `field << 3 | wire type` and its value. Hand-written
//! rather than with prost: the filter reads a few scalar fields, and every sidecar pays for its
//! module's code size at start-up (V8 compiles the whole module before the listener is ready).

/// Why bytes are not a protobuf message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtobufError {
    /// A key, varint or length runs past the end.
    Truncated,
    /// A varint over 10 bytes.
    LongVarint,
    /// Wire types 3 and 4 (groups, long deprecated) and 6, 7 (undefined).
    WireType { field: u64, wire_type: u64 },
}

impl std::fmt::Display for ProtobufError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtobufError::Truncated => write!(f, "cut short"),
            ProtobufError::LongVarint => write!(f, "a varint longer than 10 bytes"),
            ProtobufError::WireType { field, wire_type } => {
                write!(f, "field {field} has wire type {wire_type}, not one of 0, 1, 2, 5")
            }
        }
    }
}

impl std::error::Error for ProtobufError {}

/// One field's value by its wire type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    LengthDelimited(&'a [u8]),
    Fixed32([u8; 4]),
}

/// The fields of `bytes` in order (field number, value); stops after the first error.
pub fn fields(bytes: &[u8]) -> Fields<'_> {
    Fields { bytes, at: 0, failed: false }
}

pub struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, FieldValue<'a>), ProtobufError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.bytes.len() {
            return None;
        }
        let field = self.field();
        self.failed = field.is_err();
        Some(field)
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u64, FieldValue<'a>), ProtobufError> {
        let key = self.varint()?;
        let (field, wire_type) = (key >> 3, key & 7);
        let value = match wire_type {
            0 => FieldValue::Varint(self.varint()?),
            1 => FieldValue::Fixed64(self.take(8)?.try_into().map_err(|_| ProtobufError::Truncated)?),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| ProtobufError::Truncated)?;
                FieldValue::LengthDelimited(self.take(len)?)
            }
            5 => FieldValue::Fixed32(self.take(4)?.try_into().map_err(|_| ProtobufError::Truncated)?),
            other => return Err(ProtobufError::WireType { field, wire_type: other }),
        };
        Ok((field, value))
    }

    /// The next `len` bytes.
    fn take(&mut self, len: usize) -> Result<&'a [u8], ProtobufError> {
        let end = self.at.checked_add(len).filter(|end| *end <= self.bytes.len()).ok_or(ProtobufError::Truncated)?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// A base-128 varint (at most 10 bytes).
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or(ProtobufError::Truncated)?;
            self.at += 1;
            value |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(ProtobufError::LongVarint)
    }
}

/// `value` as a base-128 varint appended to `out`.
pub fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> Vec<Result<(u64, FieldValue<'_>), ProtobufError>> {
        fields(bytes).collect()
    }

    #[test]
    fn every_wire_type_reads_in_order() {
        let mut bytes = vec![0x08, 0x96, 0x01, 0x11];
        bytes.extend(1.5f64.to_le_bytes());
        bytes.extend([0x1a, 0x02, b'h', b'i', 0x25, 1, 2, 3, 4]);
        assert_eq!(
            all(&bytes),
            [
                Ok((1, FieldValue::Varint(150))),
                Ok((2, FieldValue::Fixed64(1.5f64.to_le_bytes()))),
                Ok((3, FieldValue::LengthDelimited(b"hi"))),
                Ok((4, FieldValue::Fixed32([1, 2, 3, 4]))),
            ]
        );
        assert!(all(&[]).is_empty());
    }

    #[test]
    fn bad_bytes_end_the_fields_with_the_reason() {
        assert_eq!(all(&[0x08]), [Err(ProtobufError::Truncated)]);
        assert_eq!(all(&[0x0a, 0x05, 1]), [Err(ProtobufError::Truncated)]);
        assert_eq!(all(&[0x11, 1, 2]), [Err(ProtobufError::Truncated)]);
        assert_eq!(
            all(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            [Err(ProtobufError::LongVarint)]
        );
        assert_eq!(
            all(&[0x08, 0x01, 0x0b]),
            [Ok((1, FieldValue::Varint(1))), Err(ProtobufError::WireType { field: 1, wire_type: 3 })]
        );
        let huge_length = [0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(all(&huge_length), [Err(ProtobufError::Truncated)]);
    }

    #[test]
    fn varints_round_trip() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut bytes = vec![0x08];
            write_varint(&mut bytes, value);
            assert_eq!(all(&bytes), [Ok((1, FieldValue::Varint(value)))], "{value}");
        }
    }
}
