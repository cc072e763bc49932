//! `IdWheel` against the model: ids instead of keys, inserts that replace, ids past the
//! limit, and the restart of a spent generation (`tickwheel_fuzz::run_id`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_fuzz::{run_id, IdFuzzOp};

fuzz_target!(|ops: Vec<IdFuzzOp>| run_id(&ops));
