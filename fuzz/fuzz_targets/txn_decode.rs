//! Bytes as a WAL record payload: `Txn::decode` must never panic, and a decoded Txn
//! must round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zlock_fuzz::txn_decode(data);
});
