//! The length-prefix frame codec (`convoke::transport::frame::FrameCodec`): arbitrary bytes,
//! arriving in arbitrary chunks, decoded the way a connection reads them.
//!
//! Input layout: byte 0 picks the limit of the first frame (the handshake's), byte 1 the limit
//! of every later frame (as on a connection, the limit changes once the first frame is in),
//! byte 2 the number `n` of chunk lengths that follow (each `1 + byte`, used in turn); the rest
//! is the byte stream. A limit byte `b` below 128 is `b` bytes, else `(b - 128) * 256` bytes.
//!
//! Properties: decoding never panics; no frame longer than the limit in force is returned; the
//! frames are exactly the stream's frames, in order, and what stays buffered is exactly the
//! unconsumed tail; a too-large error names the announced length and the limit, and only when
//! the one exceeds the other; the buffer does not grow ahead of the bytes that arrived; at the
//! end of the stream, an unfinished frame is reported as truncated with its byte count.

#![no_main]

use bytes::BytesMut;
use convoke::transport::frame::{FrameCodec, FrameError, LENGTH_PREFIX_BYTES};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

fn limit(b: u8) -> usize {
    if b < 128 { usize::from(b) } else { usize::from(b - 128) * 256 }
}

/// The length announced by the prefix at the start of `bytes`, if it is all there.
fn announced(bytes: &[u8]) -> Option<usize> {
    let prefix: [u8; LENGTH_PREFIX_BYTES] = bytes.get(..LENGTH_PREFIX_BYTES)?.try_into().ok()?;
    usize::try_from(u32::from_be_bytes(prefix)).ok()
}

fuzz_target!(|data: &[u8]| {
    let [first, later, n, rest @ ..] = data else { return };
    let n = usize::from(*n).min(rest.len());
    let (chunks, stream) = rest.split_at(n);
    let (first_limit, later_limit) = (limit(*first), limit(*later));

    let mut codec = FrameCodec::new(first_limit);
    let mut buf = BytesMut::new();
    let (mut fed, mut consumed, mut frames) = (0usize, 0usize, 0usize);
    let mut chunk_lengths = chunks.iter().map(|&c| usize::from(c) + 1).cycle();
    while fed < stream.len() {
        let len = chunk_lengths.next().unwrap_or(stream.len()).min(stream.len() - fed);
        buf.extend_from_slice(&stream[fed..fed + len]);
        fed += len;
        loop {
            let max = codec.max_frame_size();
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= max, "a frame of {} bytes above {max}", frame.len());
                    assert_eq!(announced(&stream[consumed..]), Some(frame.len()));
                    let start = consumed + LENGTH_PREFIX_BYTES;
                    assert_eq!(&frame[..], &stream[start..start + frame.len()]);
                    consumed = start + frame.len();
                    frames += 1;
                    if frames == 1 {
                        codec.set_max_frame_size(later_limit);
                    }
                }
                Ok(None) => {
                    assert_eq!(&buf[..], &stream[consumed..fed], "buffered bytes differ");
                    if let Some(len) = announced(&buf) {
                        assert!(len <= max, "waits for a frame of {len} bytes above {max}");
                        assert!(buf.len() < LENGTH_PREFIX_BYTES + len, "a whole frame is left");
                    }
                    break;
                }
                Err(FrameError::TooLarge { len, limit }) => {
                    assert_eq!(limit, max);
                    assert!(len > limit as u64, "{len} bytes refused by a limit of {limit}");
                    assert_eq!(announced(&stream[consumed..]).map(|a| a as u64), Some(len));
                    return;
                }
                Err(e) => panic!("decode failed with {e}"),
            }
        }
        // The decoder never reserves room for an announced frame; the buffer only grows as bytes
        // arrive (the bound leaves room for the allocator's doubling).
        assert!(buf.capacity() <= 4 * fed + 1024, "capacity {} after {fed} bytes", buf.capacity());
    }
    match codec.decode_eof(&mut buf) {
        Ok(None) => assert!(buf.is_empty()),
        Ok(Some(frame)) => {
            panic!("decode_eof found a frame of {} bytes decode did not", frame.len())
        }
        Err(FrameError::Truncated { buffered }) => {
            assert!(buffered > 0);
            assert_eq!(buffered, stream.len() - consumed);
        }
        Err(e) => panic!("decode_eof failed with {e}"),
    }
});
