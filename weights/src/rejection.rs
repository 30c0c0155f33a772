//! Why the book refused a report: a cap or a principal's quota it would pass (see `WeightParams`).

/// Why a report was refused (countable; see `as_str`). A refused report changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rejection {
    TooManyReporters,
    TooManyClusters,
    TooManyEndpoints,
    TooManyObservations,
    /// The book would hold more than `max_bytes` (see `memory.rs`).
    MemoryBudget,
    /// The principal's quota (`principal_share` of a cap) of reporters, clusters, endpoints of one
    /// cluster, or bytes (what its reporters and their observations cost).
    PrincipalReporters,
    PrincipalClusters,
    PrincipalEndpoints,
    PrincipalMemory,
}

impl Rejection {
    pub const ALL: [Rejection; 9] = [
        Rejection::TooManyReporters,
        Rejection::TooManyClusters,
        Rejection::TooManyEndpoints,
        Rejection::TooManyObservations,
        Rejection::MemoryBudget,
        Rejection::PrincipalReporters,
        Rejection::PrincipalClusters,
        Rejection::PrincipalEndpoints,
        Rejection::PrincipalMemory,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::TooManyReporters => "too_many_reporters",
            Rejection::TooManyClusters => "too_many_clusters",
            Rejection::TooManyEndpoints => "too_many_endpoints",
            Rejection::TooManyObservations => "too_many_observations",
            Rejection::MemoryBudget => "memory_budget",
            Rejection::PrincipalReporters => "principal_reporters",
            Rejection::PrincipalClusters => "principal_clusters",
            Rejection::PrincipalEndpoints => "principal_endpoints",
            Rejection::PrincipalMemory => "principal_memory",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            Rejection::TooManyReporters => "the reporter limit is reached",
            Rejection::TooManyClusters => "the cluster limit is reached",
            Rejection::TooManyEndpoints => "the per-cluster endpoint limit is reached",
            Rejection::TooManyObservations => "the reporter x endpoint limit is reached",
            Rejection::MemoryBudget => "the memory budget is spent",
            Rejection::PrincipalReporters => "this identity's share of the reporter limit is reached",
            Rejection::PrincipalClusters => "this identity's share of the cluster limit is reached",
            Rejection::PrincipalEndpoints => "this identity names as many endpoints of the cluster as one may",
            Rejection::PrincipalMemory => "this identity's share of the memory budget is spent",
        };
        f.write_str(what)
    }
}

impl std::error::Error for Rejection {}
