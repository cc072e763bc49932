//! `HashedWheel` (1 to 1024 slots, from the first byte) against the model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel::HashedWheel;
use tickwheel_fuzz::{run, Op};

fuzz_target!(|input: (u8, Vec<Op>)| {
    let (slots, ops) = input;
    run(
        HashedWheel::with_slots(usize::from(slots % 16) * 64 + 1),
        &ops,
    );
});
