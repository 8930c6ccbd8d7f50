//! The messaging envelope (`convoke::messaging::envelope::Envelope::decode`): the header of every
//! frame on the application stream (tell, ask, reply, failure), read before anything else of it.
//!
//! Properties: decoding never panics; a decoded envelope encodes and decodes back to an equal
//! envelope; and the encoding is the input itself, except for the two fields a decoder drops or
//! repairs: the correlation id of a tell (always written as 0) and a failure detail that is not
//! UTF-8 (decoded lossily).

#![no_main]

use bytes::Bytes;
use convoke::messaging::envelope::{Body, Envelope};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let frame = Bytes::copy_from_slice(data);
    let Ok(envelope) = Envelope::decode(&frame) else { return };
    let encoded = envelope.encode();
    let back = Envelope::decode(&encoded)
        .unwrap_or_else(|e| panic!("re-encoded {envelope:?} does not decode: {e}"));
    assert_eq!(back, envelope);
    match &envelope.body {
        Body::Tell { .. } => {
            let mut expected = data.to_vec();
            expected[9..17].fill(0);
            assert_eq!(&encoded[..], &expected[..]);
        }
        Body::Failure { .. } if std::str::from_utf8(&data[18..]).is_err() => {}
        _ => assert_eq!(&encoded[..], data),
    }
});
