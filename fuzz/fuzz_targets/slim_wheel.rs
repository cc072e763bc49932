//! `SlimWheel` against the model (its reset re-keys the timer in the model too).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel::SlimWheel;
use tickwheel_fuzz::{run_slim, Op};

fuzz_target!(|ops: Vec<Op>| run_slim(SlimWheel::new(), &ops));
