//! A singleton hand-over message (`convoke_singleton::HandOver`), postcard-decoded as
//! the messaging endpoint of every singleton manager decodes what a peer sends it.
//!
//! Properties: decoding never panics; a decoded message encodes to one byte, its variant index,
//! which decodes back to the same message.

#![no_main]

use convoke_singleton::HandOver;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = postcard::from_bytes::<HandOver>(data) else { return };
    let bytes = postcard::to_stdvec(&m).expect("a hand-over message encodes");
    assert_eq!(bytes.len(), 1, "{m:?} encodes as {bytes:?}");
    assert_eq!(postcard::from_bytes::<HandOver>(&bytes), Ok(m));
});
