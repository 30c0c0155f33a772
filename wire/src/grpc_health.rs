//! The gRPC health protocol's unary call (`grpc.health.v1.Health/Check`, grpc/grpc
//! doc/health-checking.md) as the filter's health checks send it over a plain HTTP/2 call: the
//! length-prefixed request message and the answer's serving status. Hand-written on `protobuf`: one
//! string field out, one enum field back (see `protobuf` for why no protobuf crate).

use crate::protobuf::{self, FieldValue, ProtobufError};

/// The method's `:path`.
pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";
/// Longest service name a check names (the setting's bound; a one-byte length varint).
pub const MAX_SERVICE_BYTES: usize = 127;

/// `HealthCheckResponse.ServingStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingStatus {
    Unknown,
    Serving,
    NotServing,
    ServiceUnknown,
    /// A value this version of the protocol does not define.
    Other(u64),
}

/// Why a Check answer's body is not one `HealthCheckResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrpcHealthError {
    /// Fewer than the 5 bytes of a message prefix, or fewer message bytes than it announces.
    Truncated,
    /// The prefix's compressed flag is set (the check accepts no compression).
    Compressed,
    /// Bytes after the one message (a unary answer has exactly one).
    TrailingBytes,
    /// The message itself.
    Message(ProtobufError),
}

impl std::fmt::Display for GrpcHealthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrpcHealthError::Truncated => write!(f, "health check answer: the message is cut short"),
            GrpcHealthError::Compressed => write!(f, "health check answer: compressed, and none was accepted"),
            GrpcHealthError::TrailingBytes => write!(f, "health check answer: bytes after the one message"),
            GrpcHealthError::Message(e) => write!(f, "health check answer: not a HealthCheckResponse: {e}"),
        }
    }
}

impl std::error::Error for GrpcHealthError {}

/// The request body: one uncompressed length-prefixed `HealthCheckRequest { service }` (empty
/// `service`: the server as a whole). Names longer than `MAX_SERVICE_BYTES` are cut to it (the
/// configuration rejects them before).
pub fn check_request(service: &str) -> Vec<u8> {
    let service = &service.as_bytes()[..service.len().min(MAX_SERVICE_BYTES)];
    let mut message = Vec::with_capacity(2 + service.len());
    if !service.is_empty() {
        message.push(0x0a); // field 1, length-delimited
        protobuf::write_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service);
    }
    let mut body = Vec::with_capacity(5 + message.len());
    body.push(0);
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);
    body
}

/// The serving status of a Check answer's body (one length-prefixed `HealthCheckResponse`; its
/// `status`, field 1, is UNKNOWN when absent, as proto3 omits zero).
pub fn read_check_response(body: &[u8]) -> Result<ServingStatus, GrpcHealthError> {
    let (prefix, rest) = body.split_at_checked(5).ok_or(GrpcHealthError::Truncated)?;
    if prefix[0] != 0 {
        return Err(GrpcHealthError::Compressed);
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    let message = rest.get(..len).ok_or(GrpcHealthError::Truncated)?;
    if rest.len() > len {
        return Err(GrpcHealthError::TrailingBytes);
    }
    let mut status = 0;
    for field in protobuf::fields(message) {
        if let (1, FieldValue::Varint(v)) = field.map_err(GrpcHealthError::Message)? {
            status = v;
        }
    }
    Ok(match status {
        0 => ServingStatus::Unknown,
        1 => ServingStatus::Serving,
        2 => ServingStatus::NotServing,
        3 => ServingStatus::ServiceUnknown,
        other => ServingStatus::Other(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes read as a status or a reason, never a panic; a framed status reads back as itself.
        #[test]
        fn any_answer_reads_without_panic(body in proptest::collection::vec(any::<u8>(), 0..64), status in 0u64..u64::MAX) {
            let _ = read_check_response(&body);
            let mut message = vec![0x08];
            protobuf::write_varint(&mut message, status);
            let read = read_check_response(&framed(&message)).unwrap();
            prop_assert_eq!(read, match status { 0 => ServingStatus::Unknown, 1 => ServingStatus::Serving,
                2 => ServingStatus::NotServing, 3 => ServingStatus::ServiceUnknown, s => ServingStatus::Other(s) });
        }
    }

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut body = vec![0];
        body.extend((message.len() as u32).to_be_bytes());
        body.extend(message);
        body
    }

    #[test]
    fn the_request_names_the_service_or_is_empty() {
        assert_eq!(check_request(""), [0, 0, 0, 0, 0]);
        assert_eq!(check_request("shop.Cart"), framed(&[&[0x0a, 9][..], b"shop.Cart"].concat()));
        let long = "s".repeat(300);
        assert_eq!(check_request(&long).len(), 5 + 2 + MAX_SERVICE_BYTES);
    }

    #[test]
    fn the_answer_reads_as_its_status() {
        assert_eq!(read_check_response(&framed(&[0x08, 1])), Ok(ServingStatus::Serving));
        assert_eq!(read_check_response(&framed(&[0x08, 2])), Ok(ServingStatus::NotServing));
        assert_eq!(read_check_response(&framed(&[0x08, 3])), Ok(ServingStatus::ServiceUnknown));
        assert_eq!(read_check_response(&framed(&[0x08, 9])), Ok(ServingStatus::Other(9)));
        assert_eq!(read_check_response(&framed(&[])), Ok(ServingStatus::Unknown), "proto3 omits zero");
        // Unknown fields are skipped; the last status wins, as protobuf merges.
        let extra = [0x12, 2, b'o', b'k', 0x08, 2, 0x08, 1];
        assert_eq!(read_check_response(&framed(&extra)), Ok(ServingStatus::Serving));
    }

    #[test]
    fn a_bad_answer_says_why() {
        assert_eq!(read_check_response(&[]), Err(GrpcHealthError::Truncated));
        assert_eq!(read_check_response(&[0, 0, 0, 0, 3, 0x08]), Err(GrpcHealthError::Truncated));
        assert_eq!(read_check_response(&[0, 0xff, 0xff, 0xff, 0xff]), Err(GrpcHealthError::Truncated));
        assert_eq!(read_check_response(&[1, 0, 0, 0, 2, 0x08, 1]), Err(GrpcHealthError::Compressed));
        assert_eq!(read_check_response(&[0, 0, 0, 0, 2, 0x08, 1, 0]), Err(GrpcHealthError::TrailingBytes));
        let err = read_check_response(&framed(&[0x08])).unwrap_err();
        assert_eq!(err, GrpcHealthError::Message(ProtobufError::Truncated));
        assert_eq!(err.to_string(), "health check answer: not a HealthCheckResponse: cut short");
    }
}
