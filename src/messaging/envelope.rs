//! The envelope of an application frame: what the messaging layer puts around a payload.
//!
//! Layout (integers big-endian):
//!
//! | bytes | field                                                        |
//! |-------|--------------------------------------------------------------|
//! | 1     | kind: 0 tell, 1 ask, 2 reply, 3 failure                      |
//! | 8     | the uid of the incarnation it is meant for                   |
//! | 8     | correlation id (0 for a tell)                                |
//! | 1 + n | tell and ask: endpoint name, length `n` (1..=255), UTF-8     |
//! | 1     | failure: its [`Failure`] code                                |
//! | rest  | tell, ask, reply: the payload; failure: a UTF-8 detail       |
//!
//! The payload is the message encoded with postcard (see `docs/messaging.md`). The envelope is
//! written by hand rather than with postcard so that the endpoint name and correlation id can be
//! read without knowing the message type, and so that a payload is copied into the frame once.

use bytes::{BufMut, Bytes, BytesMut};

/// The fixed part before the endpoint name: kind, uid, correlation id.
const HEADER_BYTES: usize = 1 + 8 + 8;

/// A decoded envelope; the payload is a slice of the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The incarnation the frame is meant for.
    pub to_uid: u64,
    pub body: Body,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Tell { endpoint: String, payload: Bytes },
    Ask { id: u64, endpoint: String, payload: Bytes },
    Reply { id: u64, payload: Bytes },
    Failure { id: u64, failure: Failure, detail: String },
}

/// Why a target answered an ask without a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No endpoint of that name is registered on the target.
    NoSuchEndpoint,
    /// The endpoint's inbound queue is full.
    Overloaded,
    /// The target could not decode the request as the endpoint's request type.
    BadRequest,
    /// The frame was meant for another incarnation of the target's address.
    WrongIncarnation,
    /// The handler dropped the request without replying (or the endpoint closed).
    NoReply,
    /// The reply could not be encoded or was too large to send.
    ReplyFailed,
}

impl Failure {
    fn code(self) -> u8 {
        match self {
            Self::NoSuchEndpoint => 1,
            Self::Overloaded => 2,
            Self::BadRequest => 3,
            Self::WrongIncarnation => 4,
            Self::NoReply => 5,
            Self::ReplyFailed => 6,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::NoSuchEndpoint,
            2 => Self::Overloaded,
            3 => Self::BadRequest,
            4 => Self::WrongIncarnation,
            5 => Self::NoReply,
            6 => Self::ReplyFailed,
            _ => return None,
        })
    }
}

/// Why bytes are not an envelope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("frame of {0} bytes is shorter than an envelope header")]
    Truncated(usize),
    #[error("unknown envelope kind {0}")]
    UnknownKind(u8),
    #[error("endpoint name is empty, cut short or not UTF-8")]
    BadEndpoint,
    #[error("unknown failure code {0}")]
    UnknownFailure(u8),
}

impl Envelope {
    /// The frame for this envelope. Endpoint names are checked (1..=255 bytes) when an endpoint
    /// key is made, so encoding cannot fail.
    pub fn encode(&self) -> Bytes {
        let (kind, id) = match &self.body {
            Body::Tell { .. } => (0, 0),
            Body::Ask { id, .. } => (1, *id),
            Body::Reply { id, .. } => (2, *id),
            Body::Failure { id, .. } => (3, *id),
        };
        let extra = match &self.body {
            Body::Tell { endpoint, payload } | Body::Ask { endpoint, payload, .. } => {
                1 + endpoint.len() + payload.len()
            }
            Body::Reply { payload, .. } => payload.len(),
            Body::Failure { detail, .. } => 1 + detail.len(),
        };
        let mut out = BytesMut::with_capacity(HEADER_BYTES + extra);
        out.put_u8(kind);
        out.put_u64(self.to_uid);
        out.put_u64(id);
        match &self.body {
            Body::Tell { endpoint, payload } | Body::Ask { endpoint, payload, .. } => {
                let name = &endpoint.as_bytes()[..endpoint.len().min(255)];
                out.put_u8(name.len() as u8);
                out.put_slice(name);
                out.put_slice(payload);
            }
            Body::Reply { payload, .. } => out.put_slice(payload),
            Body::Failure { failure, detail, .. } => {
                out.put_u8(failure.code());
                out.put_slice(detail.as_bytes());
            }
        }
        out.freeze()
    }

    /// Decodes a frame; the payload shares the frame's buffer.
    pub fn decode(frame: &Bytes) -> Result<Self, EnvelopeError> {
        if frame.len() < HEADER_BYTES {
            return Err(EnvelopeError::Truncated(frame.len()));
        }
        let kind = frame[0];
        let to_uid = u64::from_be_bytes(frame[1..9].try_into().unwrap_or_default());
        let id = u64::from_be_bytes(frame[9..17].try_into().unwrap_or_default());
        let rest = frame.slice(HEADER_BYTES..);
        let named = |rest: &Bytes| -> Result<(String, Bytes), EnvelopeError> {
            let n = usize::from(*rest.first().ok_or(EnvelopeError::BadEndpoint)?);
            let name = rest.get(1..1 + n).filter(|_| n > 0).ok_or(EnvelopeError::BadEndpoint)?;
            let name = std::str::from_utf8(name).map_err(|_| EnvelopeError::BadEndpoint)?;
            Ok((name.to_owned(), rest.slice(1 + n..)))
        };
        let body = match kind {
            0 => {
                let (endpoint, payload) = named(&rest)?;
                Body::Tell { endpoint, payload }
            }
            1 => {
                let (endpoint, payload) = named(&rest)?;
                Body::Ask { id, endpoint, payload }
            }
            2 => Body::Reply { id, payload: rest },
            3 => {
                let code = *rest.first().ok_or(EnvelopeError::Truncated(frame.len()))?;
                let failure =
                    Failure::from_code(code).ok_or(EnvelopeError::UnknownFailure(code))?;
                let detail = String::from_utf8_lossy(&rest[1..]).into_owned();
                Body::Failure { id, failure, detail }
            }
            k => return Err(EnvelopeError::UnknownKind(k)),
        };
        Ok(Self { to_uid, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(body: Body) {
        let e = Envelope { to_uid: 0x0102_0304_0506_0708, body };
        assert_eq!(Envelope::decode(&e.encode()).unwrap(), e);
    }

    #[test]
    fn every_kind_round_trips() {
        let payload = Bytes::from_static(b"\x00\x01payload");
        round_trip(Body::Tell { endpoint: "t".into(), payload: payload.clone() });
        round_trip(Body::Ask { id: 7, endpoint: "orders.get".into(), payload: payload.clone() });
        round_trip(Body::Ask { id: 8, endpoint: "e".into(), payload: Bytes::new() });
        round_trip(Body::Reply { id: u64::MAX, payload });
        for failure in [
            Failure::NoSuchEndpoint,
            Failure::Overloaded,
            Failure::BadRequest,
            Failure::WrongIncarnation,
            Failure::NoReply,
            Failure::ReplyFailed,
        ] {
            round_trip(Body::Failure { id: 9, failure, detail: "why".into() });
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let e = Envelope {
            to_uid: 5,
            body: Body::Ask { id: 6, endpoint: "ab".into(), payload: Bytes::from_static(b"xy") },
        };
        let mut want = vec![1];
        want.extend_from_slice(&5u64.to_be_bytes());
        want.extend_from_slice(&6u64.to_be_bytes());
        want.extend_from_slice(b"\x02abxy");
        assert_eq!(&e.encode()[..], &want[..]);
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        let ask = Envelope {
            to_uid: 1,
            body: Body::Ask { id: 1, endpoint: "name".into(), payload: Bytes::from_static(b"p") },
        }
        .encode();
        for cut in 0..ask.len() {
            let _ = Envelope::decode(&ask.slice(..cut));
        }
        assert_eq!(
            Envelope::decode(&Bytes::from_static(b"\x01")),
            Err(EnvelopeError::Truncated(1))
        );
        let mut bad = ask.to_vec();
        bad[0] = 9;
        assert_eq!(Envelope::decode(&Bytes::from(bad)), Err(EnvelopeError::UnknownKind(9)));
        let mut empty_name = ask[..HEADER_BYTES].to_vec();
        empty_name.push(0);
        assert_eq!(Envelope::decode(&Bytes::from(empty_name)), Err(EnvelopeError::BadEndpoint));
        let mut long_name = ask[..HEADER_BYTES].to_vec();
        long_name.extend_from_slice(b"\x09abc");
        assert_eq!(Envelope::decode(&Bytes::from(long_name)), Err(EnvelopeError::BadEndpoint));
        let mut failure = ask[..HEADER_BYTES].to_vec();
        failure[0] = 3;
        failure.push(77);
        assert_eq!(Envelope::decode(&Bytes::from(failure)), Err(EnvelopeError::UnknownFailure(77)));
    }
}
