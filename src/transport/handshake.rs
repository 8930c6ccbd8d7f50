//! The handshake: the first frame on every connection, naming the sender and the stream.
//!
//! Payload layout (all integers big-endian):
//!
//! | bytes | field                                                   |
//! |-------|---------------------------------------------------------|
//! | 4     | magic `b"CVKT"`                                         |
//! | 4     | protocol version, [`PROTOCOL_VERSION`]                  |
//! | 1     | stream kind: 0 ordinary, 1 control, 2 application       |
//! | 8     | the sender's uid (non-zero)                             |
//! | 2     | the sender's port                                       |
//! | 1 + n | the sender's system name: length `n` (1..=255), UTF-8   |
//! | 1 + n | the sender's host: length `n` (1..=255), UTF-8          |
//!
//! Magic and version come first and never move, so a peer of another version is told apart from
//! garbage and named in the log even when the rest of its handshake has a layout this version does
//! not know.

use convoke_membership::wire::PROTOCOL_VERSION;
use convoke_membership::{Address, AddressError, Uid, UniqueAddress};

/// The first four bytes of every handshake payload.
pub const MAGIC: [u8; 4] = *b"CVKT";

/// The longest handshake payload: both strings at 255 bytes.
pub const MAX_HANDSHAKE_BYTES: usize = 4 + 4 + 1 + 8 + 2 + (1 + 255) * 2;

/// What a connection carries; each kind has its own connection per peer, so heartbeats never
/// queue behind gossip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamKind {
    /// Everything but heartbeats.
    Ordinary,
    /// Heartbeats and heartbeat responses only.
    Control,
    /// Application messages between members (asks, tells, replies); see `docs/messaging.md`.
    Application,
}

impl StreamKind {
    /// The stream a message travels on.
    pub fn of(message: &convoke_membership::Message) -> Self {
        if message.is_heartbeat() { Self::Control } else { Self::Ordinary }
    }

    fn to_byte(self) -> u8 {
        match self {
            Self::Ordinary => 0,
            Self::Control => 1,
            Self::Application => 2,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Ordinary),
            1 => Some(Self::Control),
            2 => Some(Self::Application),
            _ => None,
        }
    }

    /// A lower-case name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ordinary => "ordinary",
            Self::Control => "control",
            Self::Application => "application",
        }
    }
}

/// The decoded handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The wire protocol version the sender speaks.
    pub protocol_version: u32,
    /// What the connection carries.
    pub stream: StreamKind,
    /// The sending node; its address carries the system name.
    pub from: UniqueAddress,
}

/// Why bytes are not an acceptable handshake, or a handshake cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The payload does not start with [`MAGIC`]: not a convoke transport peer.
    #[error("not a convoke handshake (first bytes {got:02x?})")]
    BadMagic {
        /// The first bytes received, at most four.
        got: Vec<u8>,
    },
    /// The peer speaks another protocol version.
    #[error("protocol version {theirs}, this node speaks {ours}")]
    UnsupportedVersion {
        /// The peer's version.
        theirs: u32,
        /// This node's version.
        ours: u32,
    },
    /// The payload ends before the handshake does.
    #[error("handshake truncated: {0} missing")]
    Truncated(&'static str),
    /// Bytes follow the handshake.
    #[error("{0} unexpected bytes after the handshake")]
    TrailingBytes(usize),
    /// A stream kind this version does not know.
    #[error("unknown stream kind {0}")]
    UnknownStream(u8),
    /// The uid is zero, which no node has.
    #[error("uid is zero")]
    ZeroUid,
    /// A string field is not UTF-8.
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A string field is longer than 255 bytes (when encoding).
    #[error("{0} is longer than 255 bytes")]
    TooLong(&'static str),
    /// The address fields do not form an address.
    #[error("bad address: {0}")]
    BadAddress(#[from] AddressError),
}

impl Handshake {
    /// The handshake this version sends.
    pub fn new(from: UniqueAddress, stream: StreamKind) -> Self {
        Self { protocol_version: PROTOCOL_VERSION, stream, from }
    }

    /// The payload, to be sent as one frame.
    ///
    /// # Errors
    /// [`HandshakeError::TooLong`] when the system name or host exceeds 255 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, HandshakeError> {
        let address = &self.from.address;
        let system = short_string(address.system(), "system name")?;
        let host = short_string(address.host(), "host")?;
        let mut out = Vec::with_capacity(MAX_HANDSHAKE_BYTES);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.protocol_version.to_be_bytes());
        out.push(self.stream.to_byte());
        out.extend_from_slice(&self.from.uid.get().to_be_bytes());
        out.extend_from_slice(&address.port().to_be_bytes());
        for s in [system, host] {
            out.push(s.len() as u8);
            out.extend_from_slice(s);
        }
        Ok(out)
    }

    /// Parses a payload; only [`PROTOCOL_VERSION`] is accepted.
    ///
    /// # Errors
    /// When the payload is not a well-formed handshake of this version; see [`HandshakeError`].
    pub fn decode(payload: &[u8]) -> Result<Self, HandshakeError> {
        let mut r = Reader(payload);
        let magic = r
            .take(MAGIC.len(), "magic")
            .map_err(|_| HandshakeError::BadMagic { got: payload.to_vec() })?;
        if magic != MAGIC {
            return Err(HandshakeError::BadMagic { got: magic.to_vec() });
        }
        let version = u32::from_be_bytes(r.array("protocol version")?);
        if version != PROTOCOL_VERSION {
            return Err(HandshakeError::UnsupportedVersion {
                theirs: version,
                ours: PROTOCOL_VERSION,
            });
        }
        let [stream] = r.array("stream kind")?;
        let stream = StreamKind::from_byte(stream).ok_or(HandshakeError::UnknownStream(stream))?;
        let uid = Uid::new(u64::from_be_bytes(r.array("uid")?)).ok_or(HandshakeError::ZeroUid)?;
        let port = u16::from_be_bytes(r.array("port")?);
        let system = r.short_string("system name")?;
        let host = r.short_string("host")?;
        if !r.0.is_empty() {
            return Err(HandshakeError::TrailingBytes(r.0.len()));
        }
        let address = Address::new(system, host, port)?;
        Ok(Self { protocol_version: version, stream, from: UniqueAddress::new(address, uid) })
    }
}

fn short_string<'a>(s: &'a str, field: &'static str) -> Result<&'a [u8], HandshakeError> {
    if s.len() > usize::from(u8::MAX) {
        return Err(HandshakeError::TooLong(field));
    }
    Ok(s.as_bytes())
}

/// A cursor that reports which field ran out.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], HandshakeError> {
        if self.0.len() < n {
            return Err(HandshakeError::Truncated(field));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], HandshakeError> {
        let bytes = self.take(N, field)?;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn short_string(&mut self, field: &'static str) -> Result<&'a str, HandshakeError> {
        let [len] = self.array(field)?;
        let bytes = self.take(usize::from(len), field)?;
        std::str::from_utf8(bytes).map_err(|_| HandshakeError::NotUtf8(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(s: &str, uid: u64) -> UniqueAddress {
        UniqueAddress::new(s.parse().unwrap(), Uid::new(uid).unwrap())
    }

    #[test]
    fn a_handshake_round_trips_for_both_stream_kinds_and_ipv6_hosts() {
        for (addr, stream) in [
            ("convoke://orders@10.0.0.7:25520", StreamKind::Ordinary),
            ("convoke://convoke@[::1]:1", StreamKind::Control),
        ] {
            let hs = Handshake::new(node(addr, u64::MAX), stream);
            let bytes = hs.encode().unwrap();
            assert!(bytes.len() <= MAX_HANDSHAKE_BYTES);
            assert_eq!(Handshake::decode(&bytes).unwrap(), hs);
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let hs = Handshake::new(node("convoke://ab@h:258", 7), StreamKind::Control);
        let mut expected = b"CVKT".to_vec();
        expected.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        expected.push(1);
        expected.extend_from_slice(&7u64.to_be_bytes());
        expected.extend_from_slice(&[1, 2, 2, b'a', b'b', 1, b'h']);
        assert_eq!(hs.encode().unwrap(), expected);
    }

    #[test]
    fn another_protocol_version_is_named_even_when_the_rest_is_unreadable() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&(PROTOCOL_VERSION + 1).to_be_bytes());
        bytes.extend_from_slice(b"\xff\xff");
        assert_eq!(
            Handshake::decode(&bytes),
            Err(HandshakeError::UnsupportedVersion {
                theirs: PROTOCOL_VERSION + 1,
                ours: PROTOCOL_VERSION
            })
        );
    }

    #[test]
    fn malformed_handshakes_are_rejected_without_panicking() {
        let good =
            Handshake::new(node("convoke://s@h:1", 3), StreamKind::Ordinary).encode().unwrap();
        assert!(matches!(
            Handshake::decode(b"GET / HTTP/1.1"),
            Err(HandshakeError::BadMagic { .. })
        ));
        assert!(matches!(Handshake::decode(b"CV"), Err(HandshakeError::BadMagic { .. })));
        for cut in 4..good.len() {
            assert!(Handshake::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(Handshake::decode(&trailing), Err(HandshakeError::TrailingBytes(1)));
        let mut stream = good.clone();
        stream[8] = 9;
        assert_eq!(Handshake::decode(&stream), Err(HandshakeError::UnknownStream(9)));
        let mut zero = good.clone();
        zero[9..17].fill(0);
        assert_eq!(Handshake::decode(&zero), Err(HandshakeError::ZeroUid));
        let mut bad_system = good;
        bad_system[20] = b'@';
        assert!(matches!(Handshake::decode(&bad_system), Err(HandshakeError::BadAddress(_))));
    }

    #[test]
    fn heartbeats_travel_on_the_control_stream() {
        let from = node("convoke://s@h:1", 3);
        let hb = convoke_membership::Message::Heartbeat { from: from.clone(), sequence_nr: 1 };
        assert_eq!(StreamKind::of(&hb), StreamKind::Control);
        let exit = convoke_membership::Message::ExitingConfirmed { node: from };
        assert_eq!(StreamKind::of(&exit), StreamKind::Ordinary);
    }
}
