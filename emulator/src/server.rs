//! Listeners: one per backend on 127.0.0.1 (closed while the backend is stopped or absent), each
//! connection handed to the backend's front end (http.rs or grpc.rs), and the admin port.

use crate::backend::{closed, Backend, Presence};
use crate::metrics;
use crate::spec::{parse_event, Protocol};
use crate::{grpc, http};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};

const BACKLOG: u32 = 1024;
/// How long an event's reply waits for the backends' ports to open or close.
const PORT_FOLLOW_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds 127.0.0.1:port with SO_REUSEADDR (so a stopped backend can listen again at once), not
/// listening yet: connections are refused, but the port (also one the OS picked) stays ours.
pub fn bind(port: u16) -> Result<TcpSocket, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let bind = || -> std::io::Result<TcpSocket> {
        let socket = TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        Ok(socket)
    };
    bind().map_err(|e| format!("cannot bind {addr}: {e}"))
}

/// Starts listening on a bound socket.
pub fn listen_on(socket: TcpSocket) -> Result<TcpListener, String> {
    let addr = socket.local_addr().map_err(|e| format!("cannot read the bound address: {e}"))?;
    socket.listen(BACKLOG).map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// Binds and listens on 127.0.0.1:port.
pub fn listen(port: u16) -> Result<TcpListener, String> {
    listen_on(bind(port)?)
}

/// The port a socket is bound to (what port 0 turned into).
pub fn bound_port(socket: &TcpSocket) -> Result<u16, String> {
    socket.local_addr().map(|a| a.port()).map_err(|e| format!("cannot read the bound address: {e}"))
}

/// The port a listener is bound to.
pub fn local_port(listener: &TcpListener) -> Result<u16, String> {
    listener.local_addr().map(|a| a.port()).map_err(|e| format!("cannot read the bound address: {e}"))
}

/// A backend's port at start: listening, or only bound while the backend is absent.
pub enum StartPort {
    Listening(TcpListener),
    Reserved(TcpSocket),
}

/// Accepts on the backend's port while it listens; otherwise the port is closed (connection refused).
pub async fn serve_backend(backend: Arc<Backend>, start: StartPort) {
    let mut port = backend.port.subscribe();
    let (mut listener, mut reserved) = match start {
        StartPort::Listening(l) => (Some(l), None),
        StartPort::Reserved(s) => (None, Some(s)),
    };
    let grpc_service = match backend.spec.protocol {
        Protocol::Grpc => Some(grpc::GrpcService::new(backend.clone())),
        Protocol::Http => None,
    };
    loop {
        let current = match listener.take() {
            Some(l) => l,
            None => {
                // Stopped or absent: wait until listening again.
                while port.borrow_and_update().presence != Presence::Listening {
                    if port.changed().await.is_err() {
                        return;
                    }
                }
                let listening = match reserved.take() {
                    Some(socket) => listen_on(socket),
                    None => listen(backend.spec.port),
                };
                match listening {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("backend {}: {e}; retrying", backend.index);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        backend.listening.send_replace(true);
        let opened = backend.port.borrow().closings;
        let mut open = backend.port.subscribe();
        loop {
            tokio::select! {
                accepted = current.accept() => match accepted {
                    Ok((stream, _)) => {
                        backend.connection_accepted();
                        match &grpc_service {
                            None => tokio::spawn(http::serve_connection(backend.clone(), stream, opened)),
                            Some(service) => tokio::spawn(grpc::serve_connection(service.clone(), stream, opened)),
                        };
                    }
                    Err(e) => {
                        // E.g. out of file descriptors: back off instead of spinning.
                        eprintln!("backend {}: accept: {e}", backend.index);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = closed(&mut open, opened) => break,
            }
        }
        drop(current);
        backend.listening.send_replace(false);
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

async fn admin(
    request: Request<Incoming>,
    backends: Arc<Vec<Arc<Backend>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
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
                // Answer once the ports follow, so a client can rely on them right after the reply.
                let mut lagging = Vec::new();
                for &i in &event.backends {
                    if let Some(b) = backends.get(i) {
                        if tokio::time::timeout(PORT_FOLLOW_TIMEOUT, port_followed(b)).await.is_err() {
                            lagging.push(i);
                        }
                    }
                }
                if lagging.is_empty() {
                    text(StatusCode::OK, format!("ok: backends {:?} {:?}\n", event.backends, event.action))
                } else {
                    text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!(
                            "event applied, but the ports of backends {lagging:?} did not follow within {} s (see the log)\n",
                            PORT_FOLLOW_TIMEOUT.as_secs()
                        ),
                    )
                }
            }
            Err(e) => text(StatusCode::BAD_REQUEST, format!("bad event: {e}\n")),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: GET /metrics, GET /healthz, POST /event?backends=..&action=..\n".into(),
        ),
    };
    Ok(response)
}

/// Resolves once the backend's port listens exactly when its presence says it should.
async fn port_followed(backend: &Backend) {
    let mut listening = backend.listening.subscribe();
    loop {
        let wanted = backend.port.borrow().presence == Presence::Listening;
        if *listening.borrow_and_update() == wanted || listening.changed().await.is_err() {
            return;
        }
    }
}
