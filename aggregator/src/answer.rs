//! The answers every handler gives: JSON, or one line of text (503s and 429s with `Retry-After`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// Seconds a shed request is told to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 1;

/// How long a refusal that says `Retry-After` is held before it is sent (`held_back`).
pub const REFUSAL_DELAY: Duration = Duration::from_millis(100);

/// `response`, after `REFUSAL_DELAY` if it is a refusal that says `Retry-After` (503, 429): a
/// client that asks again at once, as a flood on a few connections does, then asks at most
/// `1 / REFUSAL_DELAY` times a second per connection (at most `--max-connections` of them), and
/// the refusals cannot take the worker from the reports that are admitted. Nothing is held
/// meanwhile but the connection: the request's slot and memory are given back before.
pub async fn held_back(response: Response) -> Response {
    if response.headers().contains_key(header::RETRY_AFTER) {
        tokio::time::sleep(REFUSAL_DELAY).await;
    }
    response
}

/// 503 with `Retry-After` and a one-line reason.
pub fn retry_later(line: String) -> Response {
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, line);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
    response
}

/// 429 with `Retry-After: retry_after_s` and a one-line reason: this requester asked too much too
/// fast.
pub fn slow_down(retry_after_s: u64, line: String) -> Response {
    let mut response = text(StatusCode::TOO_MANY_REQUESTS, line);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s.max(1)));
    response
}

/// A 4xx (or 5xx) with a one-line text body.
pub fn text(status: StatusCode, line: impl Into<String>) -> Response {
    let mut line: String = line.into().replace(['\r', '\n'], " ");
    line.push('\n');
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], line).into_response()
}

pub fn json(body: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_refusal_saying_retry_after_is_held_back_and_nothing_else() {
        let start = tokio::time::Instant::now();
        let refused = held_back(retry_later("overloaded".into())).await;
        assert_eq!((refused.status(), start.elapsed()), (StatusCode::SERVICE_UNAVAILABLE, REFUSAL_DELAY));
        let slowed = held_back(slow_down(3, "weights".into())).await;
        assert_eq!(slowed.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(slowed.headers()[header::RETRY_AFTER], "3");
        assert_eq!(start.elapsed(), 2 * REFUSAL_DELAY);
        let served = held_back(json(b"{}".to_vec())).await;
        let bad = held_back(text(StatusCode::BAD_REQUEST, "query")).await;
        assert_eq!(
            (served.status(), bad.status(), start.elapsed()),
            (StatusCode::OK, StatusCode::BAD_REQUEST, 2 * REFUSAL_DELAY)
        );
    }
}
