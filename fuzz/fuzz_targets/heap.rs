//! `Heap` against the model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel::Heap;
use tickwheel_fuzz::{run, Op};

fuzz_target!(|ops: Vec<Op>| run(Heap::new(), &ops));
