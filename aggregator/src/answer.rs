//! The answers every handler gives: JSON, or one line of text (503s with `Retry-After`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Seconds a shed request is told to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 1;

/// 503 with `Retry-After` and a one-line reason.
pub fn retry_later(line: String) -> Response {
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, line);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
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
