//! The durable workload benchmark.
