//! Measurement support shared by tickwheel's benches, tests, lab tools and the `tickwheel`
//! command: one seeded generator and one definition of each workload's input.
//!
//! * [`SplitMix64`] is the only random generator the repository uses for inputs, so a seed
//!   means the same numbers in a criterion bench, a test and `tickwheel bench`.
//! * [`workloads`] generates the inputs of workloads W1–W5 (defined in
//!   `docs/ARCHITECTURE.md`, section "Workloads"): delay ranges, cancel orders, resets and
//!   churn operations, all from a seed, before anything is timed.
//! * [`model::Model`] is the reference queue the property tests and fuzz targets compare
//!   every queue against.
//!
//! The library depends on nothing (not even `tickwheel`), so `tickwheel` can use it as a
//! dev-dependency without a cycle in its normal build.

pub mod model;
mod rng;
pub mod workloads;

pub use rng::SplitMix64;
