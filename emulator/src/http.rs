//! The HTTP/1.1 front end: any method and path is one request of the backend's work, answered 200
//! with the payload, 503 (fail) or 429 (shed), each with `x-served-by`, the ORCA TEXT header and,
//! with `load_stamps=1`, the load stamp a server-role sidecar would write.

use crate::backend::{closed, Answer, Backend};
use crate::orca;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use tailweight_wire::stamp::{LoadStamp, LOAD_STAMP_HEADER};
use tokio::net::TcpStream;

/// Request bodies are read (so keep-alive works) up to this size and dropped.
const MAX_REQUEST_BODY: usize = 1 << 20;

/// One connection; dropped (socket closed, in-flight requests cut) when the backend's port closes.
pub async fn serve_connection(backend: Arc<Backend>, stream: TcpStream, opened: u64) {
    let _ = stream.set_nodelay(true);
    let mut port = backend.port.subscribe();
    let service = service_fn(move |request| handle(backend.clone(), request));
    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = connection => {}
        _ = closed(&mut port, opened) => {}
    }
}

async fn handle(backend: Arc<Backend>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    // Read (and drop) the body so the connection can be reused; a broken body changes nothing.
    let _ = Limited::new(request.into_body(), MAX_REQUEST_BODY).collect().await;
    let (status, body) = match backend.serve().await {
        Answer::Served => (StatusCode::OK, backend.payload.clone()),
        Answer::Failed => (StatusCode::SERVICE_UNAVAILABLE, Bytes::new()),
        Answer::Shed => (StatusCode::TOO_MANY_REQUESTS, Bytes::new()),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("text/plain"));
    // Both values are ASCII we formatted ourselves; a failure would only drop the header.
    if let Ok(v) = backend.address.parse() {
        headers.insert("x-served-by", v);
    }
    if let Ok(v) = orca::text_header(backend.load()).parse() {
        headers.insert(tailweight_wire::orca::HEADER, v);
    }
    if backend.spec.load_stamps {
        // This request has left the queue and its worker by now: the count is the others'.
        let stamp = LoadStamp { rif: backend.requests_in_flight() };
        if let Ok(v) = stamp.header_value().parse() {
            headers.insert(LOAD_STAMP_HEADER, v);
        }
    }
    Ok(response)
}
