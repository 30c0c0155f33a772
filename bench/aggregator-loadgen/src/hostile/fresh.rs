//! A fresh aggregator for one evidence attack, with the fleet's honest reporters warmed up in it:
//! each attack starts from an empty book.

use crate::args::LoadgenArgs;
use crate::drive::{run_step, wait_healthy};
use crate::fleet::Fleet;
use crate::process::{clock_ticks, start_server, AggregatorProcess};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

pub(crate) struct FreshAggregator {
    pub server: AggregatorProcess,
    pub addr: SocketAddr,
    pub pid: u32,
    pub fleet: Arc<Fleet>,
    /// The server's pid and the clock's ticks per second, for `run_step`'s CPU reading.
    pub at: Option<(u32, f64)>,
}

/// Start the aggregator, wait for it, and warm it up: two reports per reporter at once.
pub(crate) async fn fresh_aggregator(binary: &Path, args: &LoadgenArgs) -> Result<FreshAggregator, String> {
    let (server, addr) = start_server(&binary.to_path_buf(), args.server_cpu, &args.server_args)?;
    let pid = server.child.id();
    wait_healthy(addr).await?;
    let fleet =
        Arc::new(Fleet::new(args.reporters, args.endpoints, args.clusters.min(args.reporters), args.principals));
    let at = Some((pid, clock_ticks()));
    run_step(addr, &fleet, args.connections, None, Some(2 * fleet.reporters as u64), 120, at).await;
    Ok(FreshAggregator { server, addr, pid, fleet, at })
}
