//! One memory budget (`--memory-limit-mib`) from which the service's limits follow: what the
//! process needs idle, what each open connection and each request in progress may hold at most,
//! and the rest for the weight book, which counts its own bytes (`tailweight_weights`,
//! `memory.rs`) and refuses what would take it past its share. The count caps (reporters, clusters,
//! observations) follow from the book's bytes and the least a unit of each costs.

/// RSS of an idle aggregator (binary, runtime, metrics registry, thread stacks), measured with
/// `/proc/<pid>/status` after start: 6-9 MiB; rounded up.
pub const BASELINE_BYTES: usize = 16 << 20;
/// One open connection at most: hyper's read buffer (`CONNECTION_BUFFER_BYTES`), its write buffer
/// and the connection task.
pub const CONNECTION_BYTES: usize = 2 * CONNECTION_BUFFER_BYTES + 8 * 1024;
/// hyper's HTTP/1 read buffer limit per connection (also the largest request head).
pub const CONNECTION_BUFFER_BYTES: usize = 16 * 1024;
/// What a report in progress may hold, as a multiple of its body's size (declared, or
/// `max_body_bytes` when not): the body, read into one buffer of that size, and the parsed report,
/// at most about twice its JSON (the smallest endpoint record, ~105 bytes of JSON, is ~130 bytes
/// parsed, and a growing list holds up to twice its length; the caps hold while parsing).
pub const BODY_COPIES: usize = 3;
/// One endpoint of a `GET /v1/weights` page at most: its decision copied out of the book (~300
/// bytes with its address) and its JSON (~600 bytes), with room for the JSON buffer's growth.
pub const WEIGHTS_BYTES_PER_ENDPOINT: usize = 2_048;
/// One cluster of a `GET /v1/weights` page beside its endpoints: its name (at most 512 bytes) twice
/// (the page's list and the copied decision) and their JSON.
pub const WEIGHTS_BYTES_PER_CLUSTER: usize = 2_048;
/// One endpoint in a reply, at most (its JSON: the longest address, every field at its widest).
pub const REPLY_BYTES_PER_ENDPOINT: usize = 256;
/// What a CPU source's query response may hold, as a multiple of its body's size (declared, or
/// `--cpu-max-response-bytes` when not): the body, read into one buffer, and its parsed series,
/// each series' labels a map of owned strings: a series of two short labels (~90 bytes of JSON) is
/// ~350 bytes parsed (map table, four strings, the allocator's headers); an estimate, not measured.
pub const CPU_RESPONSE_COPIES: usize = 5;
/// One series of the `/metrics` page beside its label values, at most: the metric in the prometheus
/// crate's vector, its copy in the gathered family and its line of text.
pub const METRICS_BYTES_PER_SERIES: usize = 1_024;
/// Copies of a series' label values the page holds (the vector's key and metric, the family, the text).
pub const METRICS_LABEL_COPIES: usize = 4;
/// The longest endpoint label, `[IPv6]:port`.
pub const METRICS_ADDRESS_BYTES: usize = 47;
/// The registered metrics' families and the text buffer's growth beside the endpoint series.
pub const METRICS_BASE_BYTES: usize = 256 * 1024;

/// What the `/metrics` page's series of one cluster named by `name_bytes` with `endpoints` endpoints
/// may hold: `endpoints x 3 x (METRICS_BYTES_PER_SERIES + METRICS_LABEL_COPIES x (name_bytes +
/// METRICS_ADDRESS_BYTES))`. An estimate: a full page of 4,096 endpoints measured ~12 MB with
/// short cluster names and ~26 MB with 512-byte ones (RSS, one run each); this gives ~1.5x that.
pub fn metrics_cluster_cost(name_bytes: usize, endpoints: usize) -> usize {
    let series = METRICS_BYTES_PER_SERIES + METRICS_LABEL_COPIES * (name_bytes + METRICS_ADDRESS_BYTES);
    endpoints.saturating_mul(3 * series)
}

/// The least a reporter, cluster or observation costs the book (`memory.rs`'s bases, rounded
/// down): the count caps allow as many as the book's bytes could hold.
const LEAST_REPORTER_BYTES: usize = 1_000;
const LEAST_CLUSTER_BYTES: usize = 2_000;
const LEAST_OBSERVATION_BYTES: usize = 800;

/// The service's limits that bound what one request or connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceLimits {
    pub memory_limit_bytes: usize,
    pub max_connections: usize,
    pub max_concurrent_requests: usize,
    pub max_body_bytes: usize,
    pub max_reply_endpoints: usize,
    /// The largest CPU source response read (`--cpu-max-response-bytes`; 0: no CPU source).
    pub cpu_response_bytes: usize,
    /// The CPU source's queries held at once per poll (1, or 2 when pod names join to IPs).
    pub cpu_queries: usize,
}

/// What follows from the budget for the weight book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BookBudget {
    pub max_bytes: usize,
    pub max_reporters: usize,
    pub max_clusters: usize,
    pub max_observations: usize,
}

impl ServiceLimits {
    /// What a report whose body is `body_bytes` long may hold: `BODY_COPIES x body + reply`,
    /// reserved before its body is read.
    pub fn report_cost(&self, body_bytes: usize) -> usize {
        BODY_COPIES * body_bytes.min(self.max_body_bytes) + self.max_reply_endpoints * REPLY_BYTES_PER_ENDPOINT
    }

    /// The bytes requests in progress may hold in all, which each reserves before its work
    /// (`admission::MemoryBudget`): as many of the largest reports as there are request slots,
    /// `requests x report_cost(max_body_bytes)`.
    pub fn request_bytes(&self) -> usize {
        self.max_concurrent_requests.saturating_mul(self.report_cost(self.max_body_bytes))
    }

    /// What a CPU source response whose body is `body_bytes` long may hold:
    /// `CPU_RESPONSE_COPIES x body`, reserved before its body is read.
    pub fn cpu_response_cost(&self, body_bytes: usize) -> usize {
        CPU_RESPONSE_COPIES.saturating_mul(body_bytes.min(self.cpu_response_bytes))
    }

    /// The bytes the CPU source may hold at once: `queries x cpu_response_cost(max)`.
    pub fn cpu_bytes(&self) -> usize {
        self.cpu_queries.saturating_mul(self.cpu_response_cost(self.cpu_response_bytes))
    }

    /// The bytes work in progress may hold in all (`admission::MemoryBudget`), each piece reserving
    /// its part before it starts: `request_bytes + cpu_bytes`.
    pub fn work_bytes(&self) -> usize {
        self.request_bytes().saturating_add(self.cpu_bytes())
    }

    /// What connections, requests and the CPU source may hold at most, and the rest for the book:
    /// `limit - BASELINE - connections x CONNECTION_BYTES - work_bytes`. Err: one line saying what
    /// does not fit.
    pub fn book_budget(&self) -> Result<BookBudget, String> {
        let reserved = BASELINE_BYTES
            .saturating_add(self.max_connections.saturating_mul(CONNECTION_BYTES))
            .saturating_add(self.work_bytes());
        let max_bytes = self.memory_limit_bytes.saturating_sub(reserved);
        if max_bytes < 8 << 20 {
            return Err(format!(
                "memory_limit_mib: {} MiB leaves less than 8 MiB for the weights once {} MiB are set aside for {} \
                 connections, {} requests of up to {} bytes and {} CPU source responses of up to {} bytes",
                self.memory_limit_bytes >> 20,
                reserved >> 20,
                self.max_connections,
                self.max_concurrent_requests,
                self.max_body_bytes,
                self.cpu_queries,
                self.cpu_response_bytes
            ));
        }
        Ok(BookBudget {
            max_bytes,
            max_reporters: max_bytes / LEAST_REPORTER_BYTES,
            max_clusters: max_bytes / LEAST_CLUSTER_BYTES,
            max_observations: max_bytes / LEAST_OBSERVATION_BYTES,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(memory_limit_mib: usize) -> ServiceLimits {
        ServiceLimits {
            memory_limit_bytes: memory_limit_mib << 20,
            max_connections: 512,
            max_concurrent_requests: 16,
            max_body_bytes: 512 * 1024,
            max_reply_endpoints: 2_048,
            cpu_response_bytes: 0,
            cpu_queries: 0,
        }
    }

    #[test]
    fn the_book_gets_what_connections_and_requests_leave() {
        let b = limits(192).book_budget().unwrap();
        let reserved = BASELINE_BYTES + 512 * CONNECTION_BYTES + 16 * (3 * 512 * 1024 + 2_048 * 256);
        assert_eq!(b.max_bytes, (192 << 20) - reserved);
        assert_eq!(b.max_observations, b.max_bytes / 800);
        let err = limits(40).book_budget().unwrap_err();
        assert!(err.starts_with("memory_limit_mib: 40 MiB leaves less than 8 MiB") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn the_cpu_source_responses_come_out_of_the_book_before_they_are_read() {
        let without = limits(192);
        let with = ServiceLimits { cpu_response_bytes: 4 << 20, cpu_queries: 2, ..limits(192) };
        assert_eq!(without.cpu_bytes(), 0);
        assert_eq!(with.cpu_bytes(), 2 * CPU_RESPONSE_COPIES * (4 << 20));
        assert_eq!(with.work_bytes(), with.request_bytes() + with.cpu_bytes());
        let (a, b) = (without.book_budget().unwrap(), with.book_budget().unwrap());
        assert_eq!(a.max_bytes - b.max_bytes, with.cpu_bytes());
        // A response costs by its declared size, never past the largest one read.
        assert_eq!(with.cpu_response_cost(1_000), CPU_RESPONSE_COPIES * 1_000);
        assert_eq!(with.cpu_response_cost(usize::MAX), CPU_RESPONSE_COPIES * (4 << 20));
    }
}
