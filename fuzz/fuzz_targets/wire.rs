//! The membership wire format (`convoke_membership::wire`): the protobuf envelope of every message
//! kind and the gzip-compressed gossip payload with its decompression cap.
//!
//! The first byte of the input picks what the rest is (its value modulo 3):
//! - 0: one frame, decoded with `decode_with_limits`;
//! - 1: a compressed gossip payload, decoded with `decode_gossip_with_limits`;
//! - 2: an *uncompressed* gossip payload (the protobuf tables), which this target wraps in gzip
//!   (stored blocks) first, so that mutations reach the table decoding instead of failing the
//!   gzip CRC.
//!
//! Properties: decoding never panics; whatever decodes re-encodes and decodes to an equal value
//! (members compared field by field, not only by identity), and re-encoding that is stable; a
//! decoded gossip passes its invariant check; a gossip payload decompressing to more than the cap
//! is refused, one within it is not refused for its size.

#![no_main]

use std::io::Read;

use convoke_membership::Message;
use convoke_membership::gossip::Gossip;
use convoke_membership::wire::{
    DecodeError, DecodeLimits, decode_gossip_with_limits, decode_with_limits, encode, encode_gossip,
};
use flate2::Crc;
use flate2::read::GzDecoder;
use libfuzzer_sys::fuzz_target;

/// Small limits, so that the caps are reachable from inputs of a few kilobytes.
const LIMITS: DecodeLimits =
    DecodeLimits { max_frame_bytes: 64 << 10, max_decompressed_bytes: 1 << 20 };

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 3 {
        0 => frame(rest),
        1 => compressed_gossip(rest),
        _ => uncompressed_gossip(rest),
    }
});

fn frame(bytes: &[u8]) {
    let Ok(msg) = decode_with_limits(bytes, &LIMITS) else { return };
    let encoded = encode(&msg);
    let back = decode_with_limits(&encoded, &LIMITS)
        .unwrap_or_else(|e| panic!("re-encoded {msg:?} does not decode: {e}"));
    assert!(same_message(&msg, &back), "{msg:?}\n!=\n{back:?}");
    assert_eq!(encode(&back), encoded, "re-encoding is not stable for {msg:?}");
    if let Message::Welcome { gossip, .. } | Message::Gossip { gossip, .. } = &msg {
        assert!(gossip.check_invariants().is_ok(), "decoded an invalid gossip: {gossip:?}");
    }
}

fn compressed_gossip(bytes: &[u8]) {
    let decoded = decode_gossip_with_limits(bytes, &LIMITS);
    // The cap, checked against an independent decompression bounded one byte past it.
    let limit = LIMITS.max_decompressed_bytes;
    let mut raw = Vec::new();
    let gunzipped = GzDecoder::new(bytes).take(limit as u64 + 1).read_to_end(&mut raw).is_ok();
    match &decoded {
        Ok(_) => assert!(raw.len() <= limit, "accepted {} bytes decompressed", raw.len()),
        Err(DecodeError::DecompressedTooLarge { .. }) => {
            assert!(raw.len() > limit, "refused {} bytes decompressed as too large", raw.len());
        }
        Err(_) if gunzipped && raw.len() > limit => {
            panic!("{} bytes decompressed, refused for another reason: {decoded:?}", raw.len())
        }
        Err(_) => {}
    }
    if let Ok(g) = decoded {
        gossip_round_trip(&g);
    }
}

fn uncompressed_gossip(raw: &[u8]) {
    if let Ok(g) = decode_gossip_with_limits(&gzip_stored(raw), &LIMITS) {
        gossip_round_trip(&g);
    }
}

/// `raw` as gzip of uncompressed (stored) deflate blocks: valid gzip that any inflater reads,
/// made without allocating a compressor for every input.
fn gzip_stored(raw: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut blocks = raw.chunks(usize::from(u16::MAX)).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = u16::try_from(block.len()).expect("a block holds at most 65535 bytes");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let mut crc = Crc::new();
    crc.update(raw);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&crc.amount().to_le_bytes());
    out
}

fn gossip_round_trip(g: &Gossip) {
    assert!(g.check_invariants().is_ok(), "decoded an invalid gossip: {g:?}");
    let encoded = encode_gossip(g);
    let back = decode_gossip_with_limits(&encoded, &LIMITS)
        .unwrap_or_else(|e| panic!("re-encoded {g:?} does not decode: {e}"));
    assert!(same_gossip(g, &back), "{g:?}\n!=\n{back:?}");
    assert_eq!(encode_gossip(&back), encoded, "re-encoding is not stable for {g:?}");
}

/// Member equality is identity only, so gossips are also compared member by member in full.
fn same_gossip(a: &Gossip, b: &Gossip) -> bool {
    a == b && a.members().zip(b.members()).all(|(x, y)| x.same_state(y))
}

fn same_message(a: &Message, b: &Message) -> bool {
    match (a, b) {
        (Message::Welcome { gossip: x, .. }, Message::Welcome { gossip: y, .. })
        | (Message::Gossip { gossip: x, .. }, Message::Gossip { gossip: y, .. }) => {
            a == b && same_gossip(x, y)
        }
        _ => a == b,
    }
}
