//! The aggregator process the driver starts (pinned, in its own process group, stopped by PID),
//! and what /proc says about a process: its RSS and CPU time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

/// The aggregator process we started; stopped by PID (its own process group) when dropped.
pub(crate) struct AggregatorProcess {
    pub child: Child,
}

impl Drop for AggregatorProcess {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{pid}")]).status();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
        let _ = self.child.wait();
    }
}

pub(crate) fn start_server(
    binary: &PathBuf,
    cpu: usize,
    extra: &[String],
) -> Result<(AggregatorProcess, SocketAddr), String> {
    use std::os::unix::process::CommandExt;
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg(binary)
        .args(["--listen", &addr.to_string(), "--worker-threads", "1", "--log", "warn"])
        .args(extra)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    Ok((AggregatorProcess { child }, addr))
}

/// VmRSS and VmHWM of a process, in KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU seconds used by a process (all threads) so far.
pub(crate) fn cpu_seconds(pid: u32, ticks_per_s: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_s)
}

pub(crate) fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
