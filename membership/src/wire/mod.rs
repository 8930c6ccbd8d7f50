//! The protobuf encoding of [`Message`]s, schema `proto/convoke.proto` (package
//! `convoke.membership.v1`).
//!
//! One message is one encoded `Envelope`, which is what a transport frame carries. The gossip inside
//! Welcome and Gossip messages is a separately gzip-compressed payload in which every node, role and
//! app version is stored once in a table and referenced by index, so a 1000-member gossip stays a
//! few tens of kilobytes.
//!
//! Decoding treats its input as hostile: it never panics, rejects frames and decompressed gossips
//! above the [`DecodeLimits`], checks every index against its table, and hands back only values the
//! domain constructors accept (addresses via [`Address::new`](crate::Address::new), non-zero uids,
//! known statuses, gossips that pass [`Gossip::check_invariants`](crate::gossip::Gossip::check_invariants)).
//!
//! Layout: `pb` holds the generated types; `nodes` the node tables shared by gossip and gossip
//! status; `payload` the gossip tables and compression; `envelope` the mapping of each message.

mod envelope;
mod nodes;
mod payload;
mod pb;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use prost::Message as _;

use crate::address::{AddressError, UniqueAddress};
use crate::gossip::{Gossip, InvalidGossip};
use crate::message::Message;
use envelope::Sender;

pub use payload::{decode_gossip, decode_gossip_with_limits, encode_gossip, gossip_sizes};

/// The version of this wire format, exchanged in the transport handshake. Peers that speak another
/// version are refused rather than misread. Version 2 lets heartbeats, their responses and gossip
/// status leave their sender to the connection (see [`GossipEncoder::encode_on_connection`]).
pub const PROTOCOL_VERSION: u32 = 2;

/// Bounds on what a decoder accepts, so a peer cannot make a node allocate without limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// The largest encoded frame (one envelope) accepted.
    pub max_frame_bytes: usize,
    /// The largest gossip payload accepted after decompression; a gzip bomb stops here.
    pub max_decompressed_bytes: usize,
}

impl DecodeLimits {
    /// 4 MiB frames, 32 MiB decompressed gossip: far above a 1000-member gossip (under 64 KiB
    /// compressed), far below what would hurt a node.
    pub const DEFAULT: DecodeLimits =
        DecodeLimits { max_frame_bytes: 4 << 20, max_decompressed_bytes: 32 << 20 };
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why bytes are not a valid [`Message`] or gossip.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame is larger than [`DecodeLimits::max_frame_bytes`].
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge {
        /// The frame's length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not the protobuf message expected.
    #[error("malformed protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A required field is absent.
    #[error("missing field {0}")]
    MissingField(&'static str),
    /// An index does not point into its table.
    #[error("index {index} into {table} is out of range (the table has {len} entries)")]
    IndexOutOfRange {
        /// The table.
        table: &'static str,
        /// The index read.
        index: u32,
        /// The table's length.
        len: usize,
    },
    /// An address part is rejected by [`Address::new`](crate::Address::new).
    #[error("bad address: {0}")]
    BadAddress(#[from] AddressError),
    /// A port above 65535.
    #[error("port {0} is out of range (0 to 65535)")]
    PortOutOfRange(u32),
    /// A uid of zero, which no node has.
    #[error("uid is zero")]
    ZeroUid,
    /// A member status number this version does not know.
    #[error("unknown member status number {0}")]
    UnknownMemberStatus(i32),
    /// A reachability status number this version does not know.
    #[error("unknown reachability status number {0}")]
    UnknownReachabilityStatus(i32),
    /// The same entry twice where entries must be distinct.
    #[error("duplicate {0}")]
    Duplicate(&'static str),
    /// The gossip payload is not valid gzip.
    #[error("gossip payload is not valid gzip: {0}")]
    Decompress(String),
    /// The gossip payload decompresses to more than [`DecodeLimits::max_decompressed_bytes`].
    #[error("gossip payload decompresses to more than {limit} bytes")]
    DecompressedTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The gossip decodes but breaks a structural invariant.
    #[error(transparent)]
    InvalidGossip(#[from] InvalidGossip),
}

/// Encodes one message as one frame (an `Envelope`).
pub fn encode(msg: &Message) -> Vec<u8> {
    envelope::to_pb(msg).encode_to_vec()
}

/// The length of [`encode`]'s frame for `msg`, without writing it.
pub fn encoded_len(msg: &Message) -> usize {
    envelope::to_pb(msg).encoded_len()
}

/// How many recent gossip versions a [`GossipEncoder`] keeps the payload of.
const RECENT_GOSSIP_PAYLOADS: usize = 4;

/// Encodes messages as [`encode`] does, but compresses each gossip version once.
///
/// A node sends one gossip version (one `Arc<Gossip>`) to many peers, and compressing the
/// payload is most of the cost of encoding a Gossip or Welcome. The encoder keeps the payloads of
/// the last few versions it encoded, recognised by pointer, so every further send of a version
/// costs a copy instead of a compression. The bytes are the same as [`encode`]'s.
///
/// Versions are held weakly: the encoder never keeps an old gossip's members alive, and a weak
/// reference keeps its allocation, so no later version can take the same address.
#[derive(Debug, Default)]
pub struct GossipEncoder {
    recent: Mutex<VecDeque<Payload>>,
}

/// A gossip version, held weakly, and its compressed payload.
type Payload = (Weak<Gossip>, Arc<[u8]>);

impl GossipEncoder {
    /// Encodes one message as one frame, reusing the compressed payload of a recent version.
    pub fn encode(&self, msg: &Message) -> Vec<u8> {
        envelope::to_pb_with(msg, Sender::Included, &mut |g| self.payload(g).to_vec())
            .encode_to_vec()
    }

    /// Encodes one message for a connection whose handshake names the sender: a heartbeat, a
    /// heartbeat response or a gossip status leaves its sender out (a third of a heartbeat's
    /// frame otherwise, and heartbeats are most of a quiet cluster's traffic). The receiver
    /// decodes it with [`decode_on_connection`].
    pub fn encode_on_connection(&self, msg: &Message) -> Vec<u8> {
        envelope::to_pb_with(msg, Sender::LeftToConnection, &mut |g| self.payload(g).to_vec())
            .encode_to_vec()
    }

    fn payload(&self, gossip: &Arc<Gossip>) -> Arc<[u8]> {
        let recent = || self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let same = |(g, _): &&Payload| std::ptr::eq(g.as_ptr(), Arc::as_ptr(gossip));
        if let Some((_, bytes)) = recent().iter().find(same) {
            return bytes.clone();
        }
        // Compressed outside the lock: two writers may both compress a new version once.
        let bytes: Arc<[u8]> = encode_gossip(gossip).into();
        let mut recent = recent();
        if !recent.iter().any(|e| same(&e)) {
            if recent.len() == RECENT_GOSSIP_PAYLOADS {
                recent.pop_front();
            }
            recent.push_back((Arc::downgrade(gossip), bytes.clone()));
        }
        bytes
    }
}

/// Decodes one frame with the [default limits](DecodeLimits::DEFAULT).
///
/// # Errors
/// When the bytes are not a valid message; see [`DecodeError`].
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    decode_with_limits(bytes, &DecodeLimits::DEFAULT)
}

/// Decodes one frame within `limits`.
///
/// # Errors
/// When the bytes are not a valid message or exceed a limit; see [`DecodeError`].
pub fn decode_with_limits(bytes: &[u8], limits: &DecodeLimits) -> Result<Message, DecodeError> {
    decode_from(bytes, limits, None)
}

/// Decodes one frame within `limits` that came on a connection whose handshake named `sender`: a
/// message that leaves its sender out (see [`GossipEncoder::encode_on_connection`]) gets
/// `sender`; one that names its sender keeps the name it carries.
///
/// # Errors
/// As [`decode_with_limits`].
pub fn decode_on_connection(
    bytes: &[u8],
    limits: &DecodeLimits,
    sender: &UniqueAddress,
) -> Result<Message, DecodeError> {
    decode_from(bytes, limits, Some(sender))
}

fn decode_from(
    bytes: &[u8],
    limits: &DecodeLimits,
    connection: Option<&UniqueAddress>,
) -> Result<Message, DecodeError> {
    if bytes.len() > limits.max_frame_bytes {
        return Err(DecodeError::FrameTooLarge { len: bytes.len(), limit: limits.max_frame_bytes });
    }
    envelope::from_pb(pb::Envelope::decode(bytes)?, limits, connection)
}
