//! `cargo +nightly fuzz run decode_ha --features fuzz` (from crates/rmq-wire).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rmq_wire_fuzz::ha::check_decode_ha(data);
});
