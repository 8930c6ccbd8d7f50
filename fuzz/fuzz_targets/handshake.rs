//! The transport handshake (`convoke::transport::handshake::Handshake::decode`): the first frame
//! of every connection, read from peers that have not identified themselves yet.
//!
//! Properties: decoding never panics; a decoded handshake is of this protocol version, encodes
//! (its strings fit their one-byte lengths), is no longer than the input, and decodes back to an
//! equal handshake.

#![no_main]

use convoke::transport::handshake::{Handshake, MAX_HANDSHAKE_BYTES};
use convoke_membership::wire::PROTOCOL_VERSION;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(hs) = Handshake::decode(data) else { return };
    assert_eq!(hs.protocol_version, PROTOCOL_VERSION);
    let encoded = hs.encode().unwrap_or_else(|e| panic!("decoded {hs:?} does not encode: {e}"));
    assert!(encoded.len() <= data.len(), "{hs:?} encodes longer than its input");
    assert!(encoded.len() <= MAX_HANDSHAKE_BYTES);
    let back = Handshake::decode(&encoded)
        .unwrap_or_else(|e| panic!("re-encoded {hs:?} does not decode: {e}"));
    assert_eq!(back, hs);
    assert_eq!(back.encode().ok(), Some(encoded), "re-encoding is not stable for {hs:?}");
});
