//! A frame on an entity type's sharding endpoint (`convoke::sharding::wire::decode`): what a
//! region, coordinator or replica takes in from a peer — postcard, then every node address, uid,
//! ballot and coordinator table checked and turned into the sans-IO crate's messages.
//!
//! Properties: decoding never panics; a decoded frame encodes to bytes that decode back to an
//! equal frame, and encoding that again gives the same bytes.

#![no_main]

use convoke::sharding::wire::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = decode(data) else { return };
    let bytes = encode(&frame);
    let back = decode(&bytes).unwrap_or_else(|e| panic!("re-encoded {frame:?} does not decode: {e}"));
    assert_eq!(back, frame);
    assert_eq!(encode(&back), bytes, "the encoding of {frame:?} is not stable");
});
