//! How a request ended, as far as the endpoint that served it is concerned: which endpoint Envoy
//! used, after how many attempts, how long until its first response headers, and the class of the
//! answer (success, failure, overload).

use tailweight_wire::orca::OrcaLoad;

/// How a response counts for the endpoint that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponseClass {
    #[default]
    Success,
    /// 5xx, reset, timeout, connection failure, or a gRPC status configured as a failure.
    Failure,
    /// Load shedding: HTTP 429 or gRPC RESOURCE_EXHAUSTED (when configured as a failure code).
    Overload,
}

impl ResponseClass {
    pub fn is_success(self) -> bool {
        self == ResponseClass::Success
    }
}

/// gRPC RESOURCE_EXHAUSTED: what a server shedding load answers.
pub const GRPC_RESOURCE_EXHAUSTED: u32 = 8;

/// The class of a response from its HTTP status (0: none arrived) and, for gRPC requests, its
/// grpc-status: no response or 5xx is a failure, 429 overload; a gRPC status in `grpc_failure_codes`
/// is a failure (RESOURCE_EXHAUSTED overload); anything else (an application's own 4xx, NOT_FOUND,
/// INVALID_ARGUMENT...) says nothing against the endpoint.
pub fn classify(http_status: u16, grpc_status: Option<u32>, grpc_failure_codes: &[u32]) -> ResponseClass {
    match (http_status, grpc_status) {
        (0, _) | (500.., _) => ResponseClass::Failure,
        (429, _) => ResponseClass::Overload,
        (_, Some(code)) if grpc_failure_codes.contains(&code) => {
            if code == GRPC_RESOURCE_EXHAUSTED {
                ResponseClass::Overload
            } else {
                ResponseClass::Failure
            }
        }
        _ => ResponseClass::Success,
    }
}

/// What the filter saw of one finished request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestOutcome<'a> {
    /// `upstream.address`: the endpoint Envoy used last (None: no upstream was reached).
    pub served: Option<&'a str>,
    /// Upstream attempts Envoy made (`upstream.request_attempt_count`): more than 1 means the first
    /// attempt failed and was retried; 0 when unknown.
    pub attempts: u32,
    /// Until the first response headers (a stream's later messages do not count).
    pub latency_us: u64,
    pub class: ResponseClass,
    pub load: Option<OrcaLoad>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_of_http_and_grpc_outcomes() {
        let codes = [2, 4, 8, 13, 14];
        assert_eq!(classify(200, None, &codes), ResponseClass::Success);
        assert_eq!(classify(404, None, &codes), ResponseClass::Success, "the application's own answer");
        assert_eq!(classify(0, None, &codes), ResponseClass::Failure, "reset or timeout before any response");
        assert_eq!(classify(503, None, &codes), ResponseClass::Failure);
        assert_eq!(classify(500, Some(0), &codes), ResponseClass::Failure);
        assert_eq!(classify(429, None, &codes), ResponseClass::Overload);
        // gRPC answers HTTP 200 whatever happened; the status is in the trailers (or trailers-only headers).
        assert_eq!(classify(200, Some(0), &codes), ResponseClass::Success);
        assert_eq!(classify(200, Some(14), &codes), ResponseClass::Failure, "UNAVAILABLE");
        assert_eq!(classify(200, Some(13), &codes), ResponseClass::Failure, "INTERNAL");
        assert_eq!(classify(200, Some(8), &codes), ResponseClass::Overload, "RESOURCE_EXHAUSTED");
        assert_eq!(classify(200, Some(5), &codes), ResponseClass::Success, "NOT_FOUND is the application's");
        assert_eq!(classify(200, Some(14), &[13]), ResponseClass::Success, "only configured codes count");
        assert_eq!(classify(200, Some(8), &[14]), ResponseClass::Success);
    }
}
