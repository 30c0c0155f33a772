//! `poll_once` and `poll_and_record` against a query API served on 127.0.0.1: an oversized answer
//! (declared, or streamed without a length) is refused with one log line, nothing past the limit
//! is read, its reservation is given back, and the CPU values already known stay.

use super::*;
use crate::config::ServiceConfig;
use std::io::Write;
use std::sync::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const LIMIT: usize = 64 << 10;

/// A vector with `cpu` for each IP.
fn vector(pairs: &[(&str, f64)]) -> String {
    let series: Vec<String> = pairs
        .iter()
        .map(|(ip, cpu)| format!(r#"{{"metric":{{"instance":"{ip}:9100"}},"value":[1700000000.1,"{cpu}"]}}"#))
        .collect();
    format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#, series.join(","))
}

fn with_length(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A chunked answer of `chunks` chunks of 16 KiB of spaces then a vector (valid JSON, too long).
fn chunked(chunks: usize) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            .to_vec();
    for _ in 0..chunks {
        out.extend_from_slice(format!("{:x}\r\n{}\r\n", 16 << 10, " ".repeat(16 << 10)).as_bytes());
    }
    let tail = vector(&[("10.0.0.1", 9.0)]);
    out.extend_from_slice(format!("{:x}\r\n{tail}\r\n0\r\n\r\n", tail.len()).as_bytes());
    out
}

/// Serves `answers` in order, one per connection (each closed after it); returns the base URL.
async fn serve(answers: Vec<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        for answer in answers {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut byte).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&byte[..n]),
                }
            }
            // The client may stop reading (and close) mid-answer: that is the point.
            let _ = socket.write_all(&answer).await;
            let _ = socket.shutdown().await;
        }
    });
    url
}

/// Log lines written while a test runs, on its thread.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// The lines logged since the last call.
    fn take(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes).unwrap().lines().map(str::to_string).collect()
    }
}

fn cpu(state: &AppState, ip: &str) -> Option<f64> {
    state.book().external_cpu(ip.parse().unwrap()).map(|(cpu, _)| cpu)
}

#[tokio::test]
async fn an_oversized_answer_is_refused_with_one_log_line_and_nothing_is_lost() {
    let url = serve(vec![
        with_length(&vector(&[("10.0.0.1", 0.25), ("10.0.0.2", 0.5)])),
        // Declares more than the limit: refused before its body is read.
        with_length(&format!("{}{}", " ".repeat(LIMIT), vector(&[("10.0.0.1", 9.0)]))),
        // No length: refused once the body passes the limit (five 16 KiB chunks > 64 KiB).
        chunked(5),
        with_length(&vector(&[("10.0.0.1", 0.75)])),
    ])
    .await;
    let mut config = ServiceConfig::for_tests("127.0.0.1:0".parse().unwrap());
    config.cpu_url = Some(url);
    config.cpu_max_response_bytes = LIMIT as u64;
    let state = crate::state_from(&config).unwrap();
    let source = CpuSource::from_config(&config).unwrap();
    let client = reqwest::Client::builder().timeout(source.timeout).build().unwrap();
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let mut last_ok = None;

    poll_and_record(&client, &source, &state, &mut last_ok).await;
    assert_eq!((cpu(&state, "10.0.0.1"), cpu(&state, "10.0.0.2")), (Some(0.25), Some(0.5)));
    assert!(lines.take().is_empty());
    for _ in 0..2 {
        poll_and_record(&client, &source, &state, &mut last_ok).await;
        let logged = lines.take();
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(logged[0].contains("WARN") && logged[0].contains("cpu source: poll failed (keeping the last values)"));
        assert!(logged[0].contains("response is larger than 65536 bytes (--cpu-max-response-bytes)"), "{logged:?}");
        // Nothing lost: the values from before stay, and the reservation went back.
        assert_eq!((cpu(&state, "10.0.0.1"), cpu(&state, "10.0.0.2")), (Some(0.25), Some(0.5)));
        assert_eq!(state.memory.free_bytes(), state.memory.total_bytes());
    }
    assert!(state.metrics.render().contains("tailweight_cpu_source_errors_total{kind=\"too_large\"} 2"));
    // And the next answer within the limit is taken.
    poll_and_record(&client, &source, &state, &mut last_ok).await;
    assert_eq!(cpu(&state, "10.0.0.1"), Some(0.75));
    assert!(lines.take().is_empty());
}

#[tokio::test]
async fn without_the_budget_for_it_an_answer_is_not_read() {
    let url = serve(vec![with_length(&vector(&[("10.0.0.1", 0.25)]))]).await;
    let mut config = ServiceConfig::for_tests("127.0.0.1:0".parse().unwrap());
    config.cpu_url = Some(url);
    config.cpu_max_response_bytes = LIMIT as u64;
    let state = crate::state_from(&config).unwrap();
    // The CPU source's share is set aside in the budget requests reserve from.
    assert_eq!(state.memory.total_bytes(), config.service_limits().work_bytes() & !1023);
    assert_eq!(config.service_limits().cpu_bytes(), crate::budget::CPU_RESPONSE_COPIES * LIMIT);
    // Requests in progress hold all of it.
    let held = state.memory.reserve(state.memory.total_bytes()).unwrap();
    let source = CpuSource::from_config(&config).unwrap();
    let client = reqwest::Client::new();
    let err = poll_once(&client, &source, &state).await.unwrap_err();
    assert_eq!(err.kind(), "budget");
    assert!(err.to_string().contains("bytes of the memory budget are not free"), "{err}");
    assert_eq!(cpu(&state, "10.0.0.1"), None);
    drop(held);
    assert_eq!(state.memory.free_bytes(), state.memory.total_bytes());
}
