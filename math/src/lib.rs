//! tailweight-math: the small pure building blocks both halves of tailweight compute with:
//! time-weighted averages (`ewma`), medians (`stats`), a seeded generator (`rng`), fast hashing
//! (`hash`) and the recovery ramp (`ramp`). No host calls, no I/O, no clock reads: time is an
//! argument (microseconds).
//!
//! Who runs it: every process. The sidecar's filter (through `tailweight-picker` and
//! `tailweight-wire`), the aggregator (through `tailweight-weights`), the backend emulator and the
//! simulator. It depends on nothing.

pub mod ewma;
pub mod hash;
pub mod ramp;
pub mod rng;
pub mod stats;
