//! The gRPC front end: cleartext HTTP/2 (h2c) served by hyper, calls decoded and encoded by tonic's
//! generated server code. Two services, each call one request of the backend's work:
//! - `fgrpc.PingServer/Ping` (Fortio's `load -grpc -ping`): answers the request's `seq`, the time
//!   as `ts` and `payload_bytes` bytes as `payload`; the request's `delayNanos` and payload are
//!   ignored (the backend decides the service time);
//! - `tailweight.emulator.v1.Streamer/Ticks`: server streaming (proto/tailweight/emulator/v1/streamer.proto);
//! - `grpc.health.v1.Health/Check` (proto/grpc/health/v1/health.proto): SERVING for the server as a
//!   whole (service ""), NOT_FOUND for any other service, and while the backend fails or sheds the
//!   status its requests get. Like grpc-go's health server it answers at once: no worker, no
//!   service time, not a request.
//!
//! Fail and shed answer at once with UNAVAILABLE and RESOURCE_EXHAUSTED as trailers-only responses
//! (HTTP 200, grpc-status in the headers). Every answer carries `x-served-by` and the ORCA report
//! (`endpoint-load-metrics-bin`, see orca.rs) in whatever ends the call. When the port closes
//! (stop), each connection gets a GOAWAY and is closed shortly after, cutting calls still running.

use crate::backend::{closed, Answer, Backend};
use crate::orca;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::HeaderValue;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;
use tonic::body::Body;
use tonic::codegen::tokio_stream::Stream;
use tonic::codegen::Service;
use tonic::{Request, Response, Status};

#[allow(clippy::all, clippy::pedantic)]
pub mod fgrpc {
    tonic::include_proto!("fgrpc");
}

#[allow(clippy::all, clippy::pedantic)]
pub mod streamer {
    tonic::include_proto!("tailweight.emulator.v1");
}

#[allow(clippy::all, clippy::pedantic)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

use fgrpc::ping_server_server::{PingServer, PingServerServer, SERVICE_NAME as PING_SERVICE};
use fgrpc::PingMessage;
use health::health_check_response::ServingStatus;
use health::health_server::{Health, HealthServer, SERVICE_NAME as HEALTH_SERVICE};
use health::{HealthCheckRequest, HealthCheckResponse};
use streamer::streamer_server::{Streamer, StreamerServer};
use streamer::{Tick, TicksRequest};

/// Bounds of a Ticks request (a stream is at most ~69 days of ticks; tests use a few).
const MAX_TICKS: u32 = 100_000;
const MAX_GAP_MS: u32 = 60_000;
/// After the GOAWAY, the connection is driven this long (so the frame reaches the client) and then closed.
const GOAWAY_FLUSH: Duration = Duration::from_millis(10);

/// The gRPC methods of one backend.
struct GrpcHandlers {
    backend: Arc<Backend>,
    /// Ping's `payload` is a proto `string`: the backend's payload as text, made once.
    ping_payload: String,
}

/// Both services of one backend, cloned into every connection.
#[derive(Clone)]
pub struct GrpcService {
    backend: Arc<Backend>,
    ping: PingServerServer<GrpcHandlers>,
    streamer: StreamerServer<GrpcHandlers>,
    health: HealthServer<GrpcHandlers>,
}

impl GrpcService {
    pub fn new(backend: Arc<Backend>) -> Self {
        let ping_payload = String::from_utf8_lossy(&backend.payload).into_owned();
        let handlers = Arc::new(GrpcHandlers { backend: backend.clone(), ping_payload });
        GrpcService {
            backend,
            ping: PingServerServer::from_arc(handlers.clone()),
            streamer: StreamerServer::from_arc(handlers.clone()),
            health: HealthServer::from_arc(handlers),
        }
    }

    /// Routes a call by its service name; the streamer's generated router answers UNIMPLEMENTED for
    /// anything that is not its own.
    async fn route(mut self, request: hyper::Request<Incoming>) -> Result<hyper::Response<Body>, Infallible> {
        let service = request.uri().path().trim_start_matches('/').split('/').next().unwrap_or("");
        let mut response = match service {
            PING_SERVICE => self.ping.call(request).await?,
            HEALTH_SERVICE => self.health.call(request).await?,
            _ => self.streamer.call(request).await?,
        };
        if let Ok(v) = HeaderValue::from_str(&self.backend.address) {
            response.headers_mut().insert("x-served-by", v);
        }
        Ok(with_orca_report(response, self.backend))
    }
}

/// Adds the backend's ORCA report to whatever ends the call: the headers of a trailers-only answer
/// (an error status sent at once), else the trailers, computed when they are sent.
fn with_orca_report(mut response: hyper::Response<Body>, backend: Arc<Backend>) -> hyper::Response<Body> {
    if response.headers().contains_key("grpc-status") {
        response.headers_mut().insert(orca::BIN_HEADER, orca::bin_header_value(backend.load()));
        return response;
    }
    response.map(|body| {
        Body::new(body.map_frame(move |frame| match frame.into_trailers() {
            Ok(mut trailers) => {
                trailers.insert(orca::BIN_HEADER, orca::bin_header_value(backend.load()));
                Frame::trailers(trailers)
            }
            Err(frame) => frame,
        }))
    })
}

fn status_of(answer: Answer) -> Result<(), Status> {
    match answer {
        Answer::Served => Ok(()),
        Answer::Failed => Err(Status::unavailable("emulated backend failure")),
        Answer::Shed => Err(Status::resource_exhausted("emulated load shedding")),
    }
}

fn unix_nanos() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[tonic::async_trait]
impl PingServer for GrpcHandlers {
    async fn ping(&self, request: Request<PingMessage>) -> Result<Response<PingMessage>, Status> {
        let seq = request.get_ref().seq;
        status_of(self.backend.serve().await)?;
        Ok(Response::new(PingMessage { seq, ts: unix_nanos(), payload: self.ping_payload.clone(), delay_nanos: 0 }))
    }
}

#[tonic::async_trait]
impl Health for GrpcHandlers {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        if !service.is_empty() {
            return Err(Status::not_found(format!("unknown service {service:?}")));
        }
        self.backend.refusal().map_or(Ok(()), status_of)?;
        Ok(Response::new(HealthCheckResponse { status: ServingStatus::Serving.into() }))
    }
}

#[tonic::async_trait]
impl Streamer for GrpcHandlers {
    type TicksStream = Pin<Box<dyn Stream<Item = Result<Tick, Status>> + Send>>;

    /// The call waits for a worker and one service time before the first tick (like any request);
    /// the later ticks only wait their gap, holding no worker: a long-lived stream that costs its
    /// backend little once set up.
    async fn ticks(&self, request: Request<TicksRequest>) -> Result<Response<Self::TicksStream>, Status> {
        let TicksRequest { count, gap_ms } = request.into_inner();
        if !(1..=MAX_TICKS).contains(&count) {
            return Err(Status::invalid_argument(format!("count: expected 1..={MAX_TICKS}, got {count}")));
        }
        if gap_ms > MAX_GAP_MS {
            return Err(Status::invalid_argument(format!("gap_ms: expected 0..={MAX_GAP_MS}, got {gap_ms}")));
        }
        status_of(self.backend.serve().await)?;
        let gap = Duration::from_millis(u64::from(gap_ms));
        let (served_by, payload) = (self.backend.address.clone(), self.backend.payload.clone());
        let backend = self.backend.clone();
        // A backend put into fail or shed mode while the stream runs ends it with that status in
        // the trailers, after the headers and the ticks already sent.
        let ticks = futures_util::stream::unfold(Some(0u32), move |next| {
            let backend = backend.clone();
            let tick = next.map(|seq| Tick { seq, served_by: served_by.clone(), payload: payload.clone() });
            async move {
                let tick = tick?;
                if tick.seq == count {
                    return None;
                }
                if tick.seq > 0 {
                    tokio::time::sleep(gap).await;
                    if let Some(answer) = backend.refusal() {
                        return Some((status_of(answer).map(|()| tick), None));
                    }
                }
                let seq = tick.seq;
                Some((Ok(tick), Some(seq + 1)))
            }
        });
        Ok(Response::new(Box::pin(ticks)))
    }
}

/// One HTTP/2 connection (many concurrent calls). When the backend's port closes: GOAWAY, then the
/// connection is dropped GOAWAY_FLUSH later (socket closed, calls still running cut).
pub async fn serve_connection(service: GrpcService, stream: TcpStream, opened: u64) {
    let _ = stream.set_nodelay(true);
    let mut port = service.backend.port.subscribe();
    let calls = service_fn(move |request| service.clone().route(request));
    let connection = http2::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), calls);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = closed(&mut port, opened) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(GOAWAY_FLUSH, connection).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orca::OrcaLoadReport;
    use crate::server::{self, StartPort};
    use crate::spec::{parse_backend, Action};
    use base64::Engine;
    use bytes::Bytes;
    use h2::client::SendRequest;
    use h2::RecvStream;
    use hyper::HeaderMap;
    use prost::Message;

    /// A gRPC backend on a free port: `spec` without the port and protocol.
    fn start(spec: &str) -> Arc<Backend> {
        let socket = server::bind(0).unwrap();
        let port = server::bound_port(&socket).unwrap();
        let spec = parse_backend(&format!("port={port},protocol=grpc,{spec}")).unwrap();
        let start = if spec.absent {
            StartPort::Reserved(socket)
        } else {
            StartPort::Listening(server::listen_on(socket).unwrap())
        };
        let backend = Arc::new(Backend::new(0, spec, 1));
        tokio::spawn(server::serve_backend(backend.clone(), start));
        backend
    }

    /// Connects once the accept loop (a task on this test's thread) listens: it gets to run while
    /// this waits, for at most ~1 s.
    async fn connect(backend: &Backend) -> (SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
        let mut attempts = 0;
        let tcp = loop {
            match TcpStream::connect(&backend.address).await {
                Ok(tcp) => break tcp,
                Err(e) if attempts == 200 => panic!("{} never listened: {e}", backend.address),
                Err(_) => attempts += 1,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let (client, connection) = h2::client::handshake(tcp).await.unwrap();
        (client, tokio::spawn(connection))
    }

    /// One gRPC call over h2: a single request message; returns the response head and body.
    async fn call(
        client: &mut SendRequest<Bytes>,
        path: &str,
        message: impl Message,
    ) -> (hyper::http::response::Parts, RecvStream) {
        let request = hyper::Request::post(format!("http://127.0.0.1{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let mut ready = client.clone().ready().await.unwrap();
        let (response, mut send) = ready.send_request(request, false).unwrap();
        let body = message.encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed.extend_from_slice(&body);
        send.send_data(Bytes::from(framed), true).unwrap();
        response.await.unwrap().into_parts()
    }

    /// The response messages (length-prefixed) and the trailers.
    async fn read_all(mut body: RecvStream) -> (Vec<Bytes>, Option<HeaderMap>) {
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let mut messages = Vec::new();
        let mut rest = data.as_slice();
        while rest.len() >= 5 {
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            messages.push(Bytes::copy_from_slice(&rest[5..5 + len]));
            rest = &rest[5 + len..];
        }
        assert!(rest.is_empty(), "a partial message");
        (messages, body.trailers().await.unwrap())
    }

    fn orca_report(headers: &HeaderMap) -> OrcaLoadReport {
        let value = headers.get(orca::BIN_HEADER).expect("an ORCA report").to_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD.decode(value).unwrap();
        OrcaLoadReport::decode(bytes.as_slice()).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ping_answers_with_the_orca_report_in_the_trailers() {
        let backend = start("workers=1,base_ms=1,payload_bytes=3");
        let (mut client, _connection) = connect(&backend).await;
        let ping = PingMessage { seq: 42, ..Default::default() };
        let (head, body) = call(&mut client, "/fgrpc.PingServer/Ping", ping).await;
        assert_eq!(head.status, 200);
        assert_eq!(head.headers["content-type"], "application/grpc");
        assert_eq!(head.headers["x-served-by"], backend.address.as_str());
        assert!(!head.headers.contains_key(orca::BIN_HEADER), "the report comes at the end of the call");
        let (messages, trailers) = read_all(body).await;
        let answer = PingMessage::decode(messages[0].clone()).unwrap();
        assert_eq!((messages.len(), answer.seq, answer.payload.as_str()), (1, 42, "xxx"));
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
        let report = orca_report(&trailers);
        assert!(report.rps_fractional > 0.0 && report.cpu_utilization > 0.0, "{report:?}");
        assert_eq!(report.eps, 0.0);
        assert_eq!(backend.snapshot().requests_total, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn fail_and_shed_are_trailers_only_answers() {
        let backend = start("workers=1,base_ms=1");
        let (mut client, _connection) = connect(&backend).await;
        for (action, code) in [(Action::Fail, "14"), (Action::Shed, "8")] {
            backend.apply(action);
            let (head, body) = call(&mut client, "/fgrpc.PingServer/Ping", PingMessage::default()).await;
            assert_eq!(head.status, 200);
            assert_eq!(head.headers["grpc-status"], code);
            assert!(body.is_end_stream(), "{action:?}: the headers end the stream");
            assert!(orca_report(&head.headers).eps > 0.0);
        }
        let s = backend.snapshot();
        assert_eq!((s.requests_total, s.errors_total, s.shed_total), (2, 2, 1));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ticks_stream_then_end_with_the_report() {
        let backend = start("workers=1,base_ms=1,payload_bytes=2");
        let (mut client, _connection) = connect(&backend).await;
        let request = TicksRequest { count: 3, gap_ms: 1 };
        let (head, body) = call(&mut client, "/tailweight.emulator.v1.Streamer/Ticks", request).await;
        assert_eq!(head.status, 200);
        let (messages, trailers) = read_all(body).await;
        let ticks: Vec<Tick> = messages.into_iter().map(|m| Tick::decode(m).unwrap()).collect();
        assert_eq!(ticks.iter().map(|t| t.seq).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(ticks.iter().all(|t| t.served_by == backend.address && t.payload.as_ref() == b"xx"));
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
        assert!(orca_report(&trailers).rps_fractional > 0.0);
        assert_eq!(backend.snapshot().requests_total, 1, "one stream is one request");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stream_running_when_the_backend_fails_ends_with_unavailable_in_the_trailers() {
        let backend = start("workers=1,base_ms=1");
        let (mut client, _connection) = connect(&backend).await;
        let request = TicksRequest { count: 1_000, gap_ms: 20 };
        let (head, mut body) = call(&mut client, "/tailweight.emulator.v1.Streamer/Ticks", request).await;
        assert_eq!(head.status, 200);
        assert!(!head.headers.contains_key("grpc-status"), "not trailers-only");
        let first = body.data().await.expect("a tick").expect("data");
        let _ = body.flow_control().release_capacity(first.len());
        backend.apply(Action::Fail);
        let (_, trailers) = read_all(body).await;
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers["grpc-status"], "14", "UNAVAILABLE after the headers and a tick");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn bad_ticks_requests_and_unknown_methods_say_why() {
        let backend = start("workers=1,base_ms=1");
        let (mut client, _connection) = connect(&backend).await;
        for (request, needle) in [
            (TicksRequest { count: 0, gap_ms: 0 }, "count: expected 1..=100000, got 0"),
            (TicksRequest { count: 1, gap_ms: 60_001 }, "gap_ms: expected 0..=60000, got 60001"),
        ] {
            let (head, _) = call(&mut client, "/tailweight.emulator.v1.Streamer/Ticks", request).await;
            let status = Status::from_header_map(&head.headers).expect("trailers-only status");
            assert_eq!((status.code(), status.message()), (tonic::Code::InvalidArgument, needle));
        }
        let (head, _) = call(&mut client, "/grpc.health.v1.Health/Watch", HealthCheckRequest::default()).await;
        assert_eq!(head.headers["grpc-status"], "12", "UNIMPLEMENTED");
        assert_eq!(backend.snapshot().requests_total, 0, "rejected calls are not requests");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_health_service_says_serving_until_the_backend_fails() {
        let backend = start("workers=1,base_ms=1");
        let (mut client, _connection) = connect(&backend).await;
        let check = |service: &str| HealthCheckRequest { service: service.into() };
        let (head, body) = call(&mut client, "/grpc.health.v1.Health/Check", check("")).await;
        assert_eq!(head.status, 200);
        let (messages, trailers) = read_all(body).await;
        let answer = HealthCheckResponse::decode(messages[0].clone()).expect("a HealthCheckResponse");
        assert_eq!((messages.len(), answer.status()), (1, ServingStatus::Serving));
        assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
        let (head, _) = call(&mut client, "/grpc.health.v1.Health/Check", check("shop.Cart")).await;
        assert_eq!(head.headers["grpc-status"], "5", "NOT_FOUND for a service it does not know");
        backend.apply(Action::Fail);
        let (head, _) = call(&mut client, "/grpc.health.v1.Health/Check", check("")).await;
        assert_eq!(head.headers["grpc-status"], "14", "UNAVAILABLE while failing");
        assert_eq!(backend.snapshot().requests_total, 0, "checks are not requests");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn stop_sends_goaway_closes_the_connection_and_refuses_new_ones() {
        let backend = start("workers=1,base_ms=1");
        let (mut client, connection) = connect(&backend).await;
        let (head, body) = call(&mut client, "/fgrpc.PingServer/Ping", PingMessage::default()).await;
        assert_eq!(head.status, 200);
        read_all(body).await;
        backend.apply(Action::Stop);
        // The client's connection ends cleanly, closed by the server's GOAWAY.
        assert!(connection.await.unwrap().is_ok());
        let goaway = client.ready().await.expect_err("no new streams after the GOAWAY");
        assert!(goaway.is_go_away() && goaway.is_remote(), "{goaway:?}");
        assert_eq!(goaway.reason(), Some(h2::Reason::NO_ERROR));
        assert!(TcpStream::connect(&backend.address).await.is_err(), "connection refused");
        backend.apply(Action::Recover);
        let (mut client, _connection) = connect(&backend).await;
        let (head, _) = call(&mut client, "/fgrpc.PingServer/Ping", PingMessage::default()).await;
        assert_eq!(head.status, 200);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_absent_backend_refuses_connections_until_it_joins() {
        let backend = start("workers=1,base_ms=1,absent=1");
        assert!(TcpStream::connect(&backend.address).await.is_err(), "connection refused");
        backend.apply(Action::Join);
        let (mut client, _connection) = connect(&backend).await;
        let (head, _) = call(&mut client, "/fgrpc.PingServer/Ping", PingMessage::default()).await;
        assert_eq!(head.status, 200);
    }
}
