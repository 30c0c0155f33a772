//! Listeners: one per backend on 127.0.0.1 (closed while the backend is stopped) and the admin port.

use crate::backend::Backend;
use crate::metrics;
use crate::spec::parse_event;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// Binds 127.0.0.1:port with SO_REUSEADDR so a stopped backend can listen again at once.
pub fn listen(port: u16) -> Result<TcpListener, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let bind = || -> std::io::Result<TcpListener> {
        let socket = TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(1024)
    };
    bind().map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// The port a listener is bound to (what port 0 turned into).
pub fn local_port(listener: &TcpListener) -> Result<u16, String> {
    listener.local_addr().map(|a| a.port()).map_err(|e| format!("cannot read the bound address: {e}"))
}

/// Resolves once `running` is false (or its sender is gone, which never happens while serving).
async fn stopped(running: &mut watch::Receiver<bool>) {
    loop {
        if !*running.borrow_and_update() {
            return;
        }
        if running.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Accepts on the backend's port while it runs; while stopped the port is closed (connection refused).
pub async fn serve_backend(backend: Arc<Backend>, first: TcpListener) {
    let mut running = backend.running.subscribe();
    let mut listener = Some(first);
    loop {
        let current = match listener.take() {
            Some(l) => l,
            None => {
                // Stopped: wait to be recovered, then listen again.
                while !*running.borrow_and_update() {
                    if running.changed().await.is_err() {
                        return;
                    }
                }
                match listen(backend.spec.port) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("backend {}: {e}; retrying", backend.index);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        loop {
            tokio::select! {
                accepted = current.accept() => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(serve_connection(backend.clone(), stream));
                    }
                    Err(e) => {
                        // E.g. out of file descriptors: back off instead of spinning.
                        eprintln!("backend {}: accept: {e}", backend.index);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = stopped(&mut running) => break,
            }
        }
        drop(current);
    }
}

/// One HTTP/1.1 connection; dropped (socket closed, in-flight requests cut) when the backend stops.
async fn serve_connection(backend: Arc<Backend>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut running = backend.running.subscribe();
    let service = service_fn(move |request| backend.clone().handle(request));
    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = connection => {}
        _ = stopped(&mut running) => {}
    }
}

pub async fn serve_admin(listener: TcpListener, backends: Arc<Vec<Arc<Backend>>>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let backends = backends.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| admin(request, backends.clone()));
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
            Err(e) => {
                eprintln!("admin: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

fn admin(
    request: Request<Incoming>,
    backends: Arc<Vec<Arc<Backend>>>,
) -> impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> {
    let response = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => {
            let snapshots: Vec<_> = backends.iter().map(|b| b.snapshot()).collect();
            text(StatusCode::OK, metrics::render(&snapshots, metrics::process_cpu_seconds()))
        }
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into()),
        (&Method::POST, "/event") => match parse_event(request.uri().query().unwrap_or(""), backends.len()) {
            Ok(event) => {
                for &i in &event.backends {
                    if let Some(b) = backends.get(i) {
                        b.apply(event.action);
                    }
                }
                eprintln!("event: backends {:?} {:?}", event.backends, event.action);
                text(StatusCode::OK, format!("ok: backends {:?} {:?}\n", event.backends, event.action))
            }
            Err(e) => text(StatusCode::BAD_REQUEST, format!("bad event: {e}\n")),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: GET /metrics, GET /healthz, POST /event?backends=..&action=..\n".into(),
        ),
    };
    std::future::ready(Ok(response))
}
