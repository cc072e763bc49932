//! The schema version and the limits every layer checks against.

/// The version of the key layout and value format this crate reads and writes. A namespace
/// stores the version that created it; clients of another version refuse to use it.
pub const SCHEMA_VERSION: u32 = 5;

/// The longest task id, in bytes.
pub const MAX_ID_LEN: usize = 1024;

/// The default [`Config::max_payload`](crate::Config::max_payload): 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;

/// The largest [`Config::max_payload`](crate::Config::max_payload) accepted: 64 MiB (Redis itself
/// caps a value at 512 MiB, and a script copies a payload on each delivery).
pub const MAX_PAYLOAD_LIMIT: usize = 64 << 20;
