//! Length-prefixed frames: a `u32` big-endian payload length, then the payload.
//!
//! The transport reads a connection with [`FrameReader`] and writes one with [`write_frame`].
//! Neither keeps a buffer between frames: a connection waiting for its next frame holds no
//! memory for it, and a node holds a few dozen connection ends while a cluster forms (a buffered
//! reader and writer would keep 8 KiB or more at each). The reader reads the length prefix, then
//! exactly the payload, into a buffer made for that frame and handed on with it; the writer
//! hands the prefix and the payload to the socket in one vectored write.
//!
//! [`FrameCodec`] is the same format as a tokio-util codec, for tools and tests that speak the
//! protocol over a buffer. Both check the announced length with the same rule.
//!
//! The errors carry the announced length and the limit, and a stream that ends inside a frame is
//! told apart from an IO error, because the transport logs why it closed a connection. The
//! announced length is checked against the limit before any byte of the payload is kept, and
//! room is never reserved for a whole announced frame: the payload buffer grows by at most
//! [`READ_CHUNK`] ahead of the bytes that actually arrived, so a peer that announces a large frame
//! and sends nothing costs little.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{Decoder, Encoder};

/// Bytes in the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// The most room [`FrameReader`] makes for a payload ahead of its bytes arriving.
pub const READ_CHUNK: usize = 64 << 10;

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

/// The payload length `prefix` announces, if it is within `max_frame_size`.
fn announced(
    prefix: [u8; LENGTH_PREFIX_BYTES],
    max_frame_size: usize,
) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(prefix);
    match usize::try_from(len) {
        Ok(len) if len <= max_frame_size => Ok(len),
        _ => Err(FrameError::TooLarge { len: u64::from(len), limit: max_frame_size }),
    }
}

/// The length prefix of a `len`-byte payload, if it is within `max_frame_size`.
fn prefix_for(len: usize, max_frame_size: usize) -> Result<[u8; LENGTH_PREFIX_BYTES], FrameError> {
    u32::try_from(len)
        .ok()
        .filter(|_| len <= max_frame_size)
        .map(u32::to_be_bytes)
        .ok_or(FrameError::TooLarge { len: len as u64, limit: max_frame_size })
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(prefix) = src.get(..LENGTH_PREFIX_BYTES) else {
            return Ok(None);
        };
        let len = announced([prefix[0], prefix[1], prefix[2], prefix[3]], self.max_frame_size)?;
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
        let prefix = prefix_for(payload.len(), self.max_frame_size)?;
        dst.reserve(LENGTH_PREFIX_BYTES + payload.len());
        dst.put_slice(&prefix);
        dst.extend_from_slice(&payload);
        Ok(())
    }
}

/// Reads frames of at most a limit from a byte stream, one at a time, with no buffer kept between
/// frames (see the [module docs](self)).
///
/// [`next`](Self::next) is not cancellation safe: a frame partly read when its future is dropped
/// is lost, and the stream is then out of step. The transport drops the connection whenever it
/// stops waiting for a frame (idle timeout, shutdown), so nothing reads on after a lost frame.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    max_frame_size: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader of `io` that refuses payloads longer than `max_frame_size` bytes.
    pub fn new(io: R, max_frame_size: usize) -> Self {
        Self { io, max_frame_size }
    }

    /// Changes the limit, e.g. from the small handshake limit to the frame limit once a peer has
    /// identified itself.
    pub fn set_max_frame_size(&mut self, max_frame_size: usize) {
        self.max_frame_size = max_frame_size;
    }

    /// The next frame's payload; `None` when the stream ends cleanly between frames.
    ///
    /// # Errors
    /// The prefix announces more than the limit ([`FrameError::TooLarge`], read no further), the
    /// stream ends inside a frame ([`FrameError::Truncated`]), or reading fails.
    pub async fn next(&mut self) -> Option<Result<Bytes, FrameError>> {
        let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
        let mut got = 0;
        while got < LENGTH_PREFIX_BYTES {
            match self.io.read(&mut prefix[got..]).await {
                Ok(0) if got == 0 => return None,
                Ok(0) => return Some(Err(FrameError::Truncated { buffered: got })),
                Ok(n) => got += n,
                Err(e) => return Some(Err(e.into())),
            }
        }
        Some(self.payload(prefix).await)
    }

    async fn payload(&mut self, prefix: [u8; LENGTH_PREFIX_BYTES]) -> Result<Bytes, FrameError> {
        let len = announced(prefix, self.max_frame_size)?;
        let mut payload = BytesMut::new();
        while payload.len() < len {
            let start = payload.len();
            payload.resize(start + (len - start).min(READ_CHUNK), 0);
            match self.io.read(&mut payload[start..]).await? {
                0 => {
                    return Err(FrameError::Truncated { buffered: LENGTH_PREFIX_BYTES + start });
                }
                n => payload.truncate(start + n),
            }
        }
        Ok(payload.freeze())
    }
}

/// Writes one frame, the prefix and `payload`, in as few writes as the stream takes (one vectored
/// write on a socket); does not flush.
///
/// # Errors
/// `payload` is longer than `max_frame_size` ([`FrameError::TooLarge`], nothing written), or
/// writing fails.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    io: &mut W,
    payload: &[u8],
    max_frame_size: usize,
) -> Result<(), FrameError> {
    let prefix = prefix_for(payload.len(), max_frame_size)?;
    io.write_all_buf(&mut Buf::chain(prefix.as_slice(), payload)).await?;
    Ok(())
}

/// Appends one frame, the prefix and then `payload`, to `out`, for a writer that gathers several
/// frames into one write.
///
/// # Errors
/// [`FrameError::TooLarge`] when `payload` is longer than `max_frame_size`; `out` is unchanged.
pub fn append_frame(
    out: &mut Vec<u8>,
    payload: &[u8],
    max_frame_size: usize,
) -> Result<(), FrameError> {
    out.extend_from_slice(&prefix_for(payload.len(), max_frame_size)?);
    out.extend_from_slice(payload);
    Ok(())
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
    fn gathered_frames_decode_one_by_one_and_an_oversized_one_is_not_appended() {
        let mut gathered = Vec::new();
        for p in [&b"abc"[..], b"", b"0123456789abcdef"] {
            append_frame(&mut gathered, p, 16).unwrap();
        }
        let before = gathered.clone();
        let err = append_frame(&mut gathered, &[0; 17], 16).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len: 17, limit: 16 }), "{err}");
        assert_eq!(gathered, before);
        let frames = decode_all(&mut FrameCodec::new(16), &gathered).unwrap();
        assert_eq!(frames, [&b"abc"[..], b"", b"0123456789abcdef"]);
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

    fn read_all(bytes: &[u8], limit: usize) -> (Vec<Bytes>, Option<FrameError>) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut reader = FrameReader::new(bytes, limit);
            let mut frames = Vec::new();
            loop {
                match reader.next().await {
                    None => return (frames, None),
                    Some(Ok(f)) => frames.push(f),
                    Some(Err(e)) => return (frames, Some(e)),
                }
            }
        })
    }

    #[test]
    fn frames_written_one_at_a_time_are_read_back_one_at_a_time() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let payloads = [&b"abc"[..], b"", &[7u8; 100_000][..]];
        let wire = rt.block_on(async {
            let mut wire = Vec::new();
            for p in payloads {
                write_frame(&mut wire, p, 100_000).await.unwrap();
            }
            wire
        });
        let mut codec = FrameCodec::new(100_000);
        assert_eq!(decode_all(&mut codec, &wire).unwrap(), payloads, "the codec reads it too");
        let (frames, error) = read_all(&wire, 100_000);
        assert_eq!(frames, payloads);
        assert!(error.is_none(), "{error:?}");
    }

    #[test]
    fn the_reader_refuses_an_oversized_prefix_and_tells_a_truncated_frame_from_a_clean_end() {
        let (frames, error) = read_all(&u32::MAX.to_be_bytes(), 1024);
        assert!(frames.is_empty());
        assert!(matches!(error, Some(FrameError::TooLarge { limit: 1024, .. })), "{error:?}");

        let mut bytes = encode_frame(b"whole");
        bytes.extend_from_slice(&10u32.to_be_bytes());
        bytes.extend_from_slice(b"par");
        let (frames, error) = read_all(&bytes, 1024);
        assert_eq!(frames, [&b"whole"[..]]);
        assert!(matches!(error, Some(FrameError::Truncated { buffered: 7 })), "{error:?}");

        let (frames, error) = read_all(&bytes[..11], 1024);
        assert_eq!(frames, [&b"whole"[..]]);
        assert!(matches!(error, Some(FrameError::Truncated { buffered: 2 })), "{error:?}");

        let (frames, error) = read_all(&encode_frame(b"whole"), 1024);
        assert_eq!(frames, [&b"whole"[..]]);
        assert!(error.is_none(), "{error:?}");
    }

    #[test]
    fn the_writer_refuses_a_payload_above_the_limit_and_writes_nothing() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut wire = Vec::new();
        let err = rt.block_on(write_frame(&mut wire, b"12345", 4)).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len: 5, limit: 4 }), "{err}");
        assert!(wire.is_empty());
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
