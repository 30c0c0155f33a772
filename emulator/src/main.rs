//! tailweight-emulator: many heterogeneous HTTP/1.1 and gRPC backends in one small process (see
//! spec.rs for the command line and docs/scenario.md for what the numbers mean).

mod backend;
mod grpc;
mod http;
mod metrics;
mod orca;
mod server;
mod service_time;
mod spec;
mod window;

use backend::Backend;
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", spec::USAGE);
        return;
    }
    let config = match spec::parse_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tailweight-emulator: {e}\n{}", spec::USAGE);
            std::process::exit(2);
        }
    };
    // One thread serves every backend, HTTP/1.1 and gRPC alike: service times are sleeps, so the
    // work is only protocol handling.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tailweight-emulator: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(config)) {
        eprintln!("tailweight-emulator: {e}");
        std::process::exit(1);
    }
}

async fn run(mut config: spec::Config) -> Result<(), String> {
    backend::now_us(); // start the clock
    let mut ports = Vec::with_capacity(config.backends.len());
    for spec in &mut config.backends {
        let socket = server::bind(spec.port)?;
        // Port 0 took whatever the OS gave: that port is the backend's from now on (a stopped
        // backend listens on it again when it recovers; an absent one keeps it bound until it joins).
        spec.port = server::bound_port(&socket)?;
        ports.push(if spec.absent {
            server::StartPort::Reserved(socket)
        } else {
            server::StartPort::Listening(server::listen_on(socket)?)
        });
    }
    let admin = server::listen(config.admin_port)?;
    let admin_port = server::local_port(&admin)?;
    let backends: Arc<Vec<Arc<Backend>>> = Arc::new(
        config.backends.iter().enumerate().map(|(i, s)| Arc::new(Backend::new(i, s.clone(), config.seed))).collect(),
    );
    for (b, port) in backends.iter().zip(ports) {
        tokio::spawn(server::serve_backend(b.clone(), port));
    }
    tokio::spawn(server::serve_admin(admin, backends.clone()));
    let ports: Vec<u16> = backends.iter().map(|b| b.spec.port).collect();
    if let Some(path) = &config.ready_file {
        write_ready_file(path, admin_port, &ports)?;
    }
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    println!("tailweight-emulator: admin 127.0.0.1:{admin_port}, backends on 127.0.0.1 ports {}", list.join(","));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    Ok(())
}

/// `{"admin": P, "backends": [P0, ..]}`, written to a temporary name and renamed into place, so a
/// reader never sees half of it.
fn write_ready_file(path: &str, admin_port: u16, ports: &[u16]) -> Result<(), String> {
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    let body = format!("{{\"admin\": {admin_port}, \"backends\": [{}]}}\n", list.join(", "));
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, body)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("--ready-file {path}: cannot write: {e}"))
}
