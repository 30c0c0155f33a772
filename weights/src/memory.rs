//! The weight book's memory, counted as it grows and shrinks, so that `WeightParams::max_bytes`
//! bounds it by construction: each unit the book holds costs at most `base + per_byte x` the length
//! of its name (or address). The figures come from `make bench-memory` (weights/tests/memory.rs: a
//! counting allocator, each unit added with nothing it could share, eight principals per endpoint
//! where observations are measured, averaged over a span in which hash tables and vectors grow),
//! plus about half for the steps in which they double. They include the unit's share of the
//! recompute's scratch buffers (which grow with the largest cluster) and of the reply views
//! published at recompute. weights/tests/memory.rs checks that the count stays above what is really
//! allocated, for sizes just past a doubling.

/// What one unit of the book costs: `base + per_byte x length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cost {
    base: usize,
    per_byte: usize,
}

impl Cost {
    pub const fn of(&self, length: usize) -> usize {
        self.base + self.per_byte * length
    }
}

/// A live reporter incarnation, without its routes (measured 588 + 1 per byte of its name).
pub(crate) const REPORTER: Cost = Cost { base: 900, per_byte: 1 };
/// A reporter's route through one cluster of its report (the entries are the observations').
pub(crate) const ROUTE: Cost = Cost { base: 160, per_byte: 0 };
/// A principal (measured 572 + 1 per byte of its name).
pub(crate) const PRINCIPAL: Cost = Cost { base: 800, per_byte: 1 };
/// A cluster (measured 1484 + 2 per byte of its name).
pub(crate) const CLUSTER: Cost = Cost { base: 2_000, per_byte: 2 };
/// An endpoint with its decision and published view (measured 1627 + 2 per byte of address).
pub(crate) const ENDPOINT: Cost = Cost { base: 2_400, per_byte: 5 };
/// One reporter's observation of one endpoint with its route entry (measured 556 + 1.2 per byte
/// of the address, eight principals per endpoint).
pub(crate) const OBSERVATION: Cost = Cost { base: 800, per_byte: 2 };
/// One endpoint's attestation record, by the length of its address and cluster name (measured
/// about 318 bytes beside its sources, at names of 8 and 512 bytes; counted high, with its share
/// of the cluster's record).
pub(crate) const ATTESTED_ENDPOINT: Cost = Cost { base: 1_200, per_byte: 2 };
/// One source principal of an endpoint's attestation (one attesting incarnation), by the length
/// of its name (measured 832 + 1.0 per byte: a hash-map entry with its name, and a vector of
/// records that starts with room for four).
pub(crate) const ATTESTED_SOURCE: Cost = Cost { base: 1_300, per_byte: 2 };
