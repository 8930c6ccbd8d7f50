//! Length-prefixed frames: a `u32` big-endian payload length, then the payload.
//!
//! [`FrameCodec`] is a tokio-util codec. It is written here rather than taken from
//! `LengthDelimitedCodec` because the transport logs why it closed a connection: the decoder's
//! errors carry the announced length and the limit, and a stream that ends inside a frame is told
//! apart from an IO error.
//!
//! The decoder checks the announced length against the limit before it keeps any bytes of the
//! payload, and it never reserves room for a whole announced frame: the read buffer grows only as
//! bytes actually arrive, so a peer that announces a large frame and sends nothing costs nothing.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Bytes in the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Why a byte stream is not a sequence of acceptable frames.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix announces more than the limit.
    #[error("length prefix announces {len} bytes, above the limit of {limit} bytes")]
    TooLarge {
        /// The announced payload length.
        len: u64,
        /// The limit.
        limit: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({buffered} bytes of an unfinished frame)")]
    Truncated {
        /// Bytes received of the unfinished frame, prefix included.
        buffered: usize,
    },
    /// Reading or writing the socket failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Encodes and decodes length-prefixed frames of at most `max_frame_size` payload bytes.
#[derive(Clone, Debug)]
pub struct FrameCodec {
    max_frame_size: usize,
}

impl FrameCodec {
    /// A codec that refuses payloads longer than `max_frame_size` bytes in both directions.
    pub fn new(max_frame_size: usize) -> Self {
        Self { max_frame_size }
    }

    /// The current limit.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Changes the limit, e.g. from the small handshake limit to the frame limit once a peer has
    /// identified itself.
    pub fn set_max_frame_size(&mut self, max_frame_size: usize) {
        self.max_frame_size = max_frame_size;
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(prefix) = src.get(..LENGTH_PREFIX_BYTES) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > self.max_frame_size {
            return Err(FrameError::TooLarge { len: len as u64, limit: self.max_frame_size });
        }
        if src.len() - LENGTH_PREFIX_BYTES < len {
            return Ok(None);
        }
        src.advance(LENGTH_PREFIX_BYTES);
        Ok(Some(src.split_to(len).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated { buffered: src.len() }),
        }
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, payload: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|_| payload.len() <= self.max_frame_size)
            .ok_or(FrameError::TooLarge {
                len: payload.len() as u64,
                limit: self.max_frame_size,
            })?;
        dst.reserve(LENGTH_PREFIX_BYTES + payload.len());
        dst.put_u32(len);
        dst.extend_from_slice(&payload);
        Ok(())
    }
}

/// One frame as bytes: the prefix, then `payload`. For tools and tests that speak the protocol
/// without a codec.
///
/// # Panics
/// When `payload` is 4 GiB or longer, which no prefix can announce.
pub fn encode_frame(payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a frame payload fits in u32");
    let mut out = Vec::with_capacity(LENGTH_PREFIX_BYTES + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut FrameCodec, bytes: &[u8]) -> Result<Vec<Bytes>, FrameError> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(f) = codec.decode(&mut buf)? {
            out.push(f);
        }
        if let Some(f) = codec.decode_eof(&mut buf)? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn frames_round_trip_back_to_back() {
        let mut codec = FrameCodec::new(16);
        let mut wire = BytesMut::new();
        for p in [&b"abc"[..], b"", b"0123456789abcdef"] {
            codec.encode(Bytes::copy_from_slice(p), &mut wire).unwrap();
        }
        let frames = decode_all(&mut codec, &wire).unwrap();
        assert_eq!(frames, [&b"abc"[..], b"", b"0123456789abcdef"]);
        assert_eq!(&encode_frame(b"abc")[..], &wire[..7]);
    }

    #[test]
    fn a_partial_frame_waits_for_more_bytes_without_reserving_the_announced_length() {
        let mut codec = FrameCodec::new(1 << 20);
        let mut buf = BytesMut::with_capacity(8);
        buf.extend_from_slice(&(1u32 << 20).to_be_bytes());
        buf.extend_from_slice(b"xy");
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert!(buf.capacity() < 1024, "capacity {}", buf.capacity());
    }

    #[test]
    fn an_oversized_length_prefix_is_refused_before_the_payload_arrives() {
        let mut codec = FrameCodec::new(1024);
        let mut buf = BytesMut::from(&u32::MAX.to_be_bytes()[..]);
        let err = codec.decode(&mut buf).unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { len, limit: 1024 } if len == u64::from(u32::MAX)),
            "{err}"
        );
    }

    #[test]
    fn a_stream_ending_inside_a_frame_is_truncated_but_a_clean_end_is_not() {
        let mut codec = FrameCodec::new(1024);
        let mut bytes = encode_frame(b"whole");
        bytes.extend_from_slice(&10u32.to_be_bytes());
        bytes.extend_from_slice(b"par");
        let err = decode_all(&mut codec, &bytes).unwrap_err();
        assert!(matches!(err, FrameError::Truncated { buffered: 7 }), "{err}");
        assert!(decode_all(&mut codec, &bytes[..2]).is_err());
        assert_eq!(decode_all(&mut codec, &encode_frame(b"whole")).unwrap(), [&b"whole"[..]]);
    }

    #[test]
    fn the_encoder_refuses_a_payload_above_the_limit() {
        let mut codec = FrameCodec::new(4);
        let mut wire = BytesMut::new();
        let err = codec.encode(Bytes::from_static(b"12345"), &mut wire).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len: 5, limit: 4 }), "{err}");
        assert!(wire.is_empty());
    }
}
