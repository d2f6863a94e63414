//! Bytes as a client would send them: framing, then every frame as a request (and the
//! first as a ConnectRequest). Must never panic; decoded requests must round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zlock_fuzz::frame_decode(data);
});
