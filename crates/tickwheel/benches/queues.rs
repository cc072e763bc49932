//! Queue micro-benchmarks (placeholder).
fn main() {}
