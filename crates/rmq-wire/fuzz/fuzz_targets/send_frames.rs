//! `cargo +nightly fuzz run send_frames --features fuzz` (from crates/rmq-wire).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rmq_wire_fuzz::send::check_send_frames(data);
});
