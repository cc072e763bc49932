//! `Wheel` against the model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel::Wheel;
use tickwheel_fuzz::{run, Op};

fuzz_target!(|ops: Vec<Op>| run(Wheel::new(), &ops));
