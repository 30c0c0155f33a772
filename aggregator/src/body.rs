//! Reading a request body within its limits: at most `limit` bytes (413 past it, or at once if
//! the declared length is larger), into one buffer of the declared size, and no slower than a
//! minimum rate (408 otherwise, so a trickler gives its slot back).
//! Hand-written over `http_body_util`: its `Limited` bounds the size but not the rate.

use axum::body::Body;
use axum::http::{header, HeaderMap};
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::time::Instant;

/// How long a body may take before the minimum rate applies (a slow start, a short stall).
pub const BODY_RATE_GRACE: Duration = Duration::from_secs(1);

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Larger than the limit (declared or sent).
    TooLarge { limit: usize },
    /// Slower than the minimum rate.
    TooSlow { received: usize, bytes_per_s: usize },
    /// The connection failed while reading (hyper's reason).
    Broken(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge { limit } => write!(f, "body: larger than the limit of {limit} bytes"),
            BodyError::TooSlow { received, bytes_per_s } => write!(
                f,
                "body: slower than {bytes_per_s} bytes/s after {} ms ({received} bytes received)",
                BODY_RATE_GRACE.as_millis()
            ),
            BodyError::Broken(reason) => write!(f, "body: could not be read: {reason}"),
        }
    }
}

/// The declared length (`content-length`), if any and readable.
pub fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok())
}

/// The body, within `limit` bytes, arriving at `min_rate` bytes per second at least (0: any):
/// by `BODY_RATE_GRACE + received / min_rate` after it starts, each next byte must have come. The
/// buffer is allocated once: the declared length, or `limit` when none is declared.
pub async fn read_body(
    body: Body,
    declared: Option<usize>,
    limit: usize,
    min_rate: usize,
) -> Result<Vec<u8>, BodyError> {
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge { limit });
    }
    let started = Instant::now();
    let mut buffer = Vec::with_capacity(declared.unwrap_or(limit));
    let mut body = body;
    loop {
        let next = body.frame();
        let frame = if min_rate == 0 {
            next.await
        } else {
            let due = started + BODY_RATE_GRACE + Duration::from_secs_f64(buffer.len() as f64 / min_rate as f64);
            match tokio::time::timeout_at(due, next).await {
                Ok(frame) => frame,
                Err(_) => return Err(BodyError::TooSlow { received: buffer.len(), bytes_per_s: min_rate }),
            }
        };
        let Some(frame) = frame else { return Ok(buffer) };
        let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            // Within the declared length too, so the buffer never grows past what was reserved.
            if buffer.len() + data.len() > declared.unwrap_or(limit) {
                return Err(BodyError::TooLarge { limit });
            }
            buffer.extend_from_slice(&data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;

    /// A body that sends `chunks`, waiting `gap` before each (on tokio's paused clock: no real time).
    fn trickled(chunks: Vec<&'static [u8]>, gap: Duration) -> Body {
        Body::from_stream(futures_util::stream::unfold(chunks.into_iter(), move |mut rest| async move {
            let next = rest.next()?;
            tokio::time::sleep(gap).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(next)), rest))
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_slower_than_the_minimum_rate_is_cut_off() {
        // 10 bytes a second against a minimum of 100: cut off once past the grace.
        let slow = trickled(vec![b"0123456789"; 50], Duration::from_millis(1_000));
        let err = read_body(slow, None, 1_000, 100).await.unwrap_err();
        assert!(matches!(err, BodyError::TooSlow { received, .. } if received < 50), "{err}");
        // The same bytes quickly are read whole.
        let fast = trickled(vec![b"0123456789"; 50], Duration::from_millis(10));
        assert_eq!(read_body(fast, Some(500), 1_000, 100).await.unwrap().len(), 500);
    }

    #[tokio::test]
    async fn a_body_past_its_limit_or_declared_length_is_too_large() {
        let err = read_body(Body::from(vec![0u8; 10]), Some(2_000), 1_000, 0).await.unwrap_err();
        assert_eq!(err, BodyError::TooLarge { limit: 1_000 });
        assert_eq!(read_body(Body::from(vec![0u8; 1_001]), None, 1_000, 0).await.unwrap_err(), err);
        assert_eq!(read_body(Body::from(vec![0u8; 11]), Some(10), 1_000, 0).await.unwrap_err(), err);
        assert_eq!(read_body(Body::from(vec![7u8; 10]), Some(10), 1_000, 0).await.unwrap(), vec![7u8; 10]);
    }
}
