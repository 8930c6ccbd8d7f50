//! What stores send each other, and what a caller asks of and hears from its store.
//!
//! Messages travel postcard-encoded on the store's lane of the transport; [`decode`] is the one
//! way in for peer bytes, and refuses anything that does not decode or breaks a limit.

use serde::{Deserialize, Serialize};

use crate::config::Level;
use crate::crdt::CrdtOp;
use crate::fenced::{FenceOp, FenceRefusal, Fenced};
use crate::object::{Key, Object, Read, Refused, Value};
use crate::ring::Span;
use crate::version::VersionVector;

/// A request as a caller makes it, and as a node forwards it to a replica that coordinates it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Read `key` from `r` replicas.
    Get {
        /// The key.
        key: Key,
        /// How many replicas must answer.
        r: Level,
    },
    /// Write `value` (bytes, or a tombstone for a delete) under `key`, superseding what
    /// `context` saw; done when `w` replicas hold it.
    Put {
        /// The key.
        key: Key,
        /// The value.
        value: Value,
        /// The context of the caller's last read (empty for a blind write).
        context: VersionVector,
        /// How many replicas must hold it.
        w: Level,
    },
    /// Apply `op` to the CRDT under `key` (an empty one of the op's kind when absent), at
    /// wall-clock time `now_ms`; done when `w` replicas hold the result.
    Update {
        /// The key.
        key: Key,
        /// The update.
        op: CrdtOp,
        /// Milliseconds of the caller's wall clock (registers order writes by it).
        now_ms: u64,
        /// How many replicas must hold it.
        w: Level,
    },
    /// Read the fenced value under `key` from `r` of the key's own replicas (no stand-in
    /// counts), so that the read meets every fenced write acknowledged at a level with it
    /// (`docs/data.md`, "Fenced values").
    FencedRead {
        /// The key.
        key: Key,
        /// How many of its replicas must answer.
        r: Level,
    },
    /// Claim or write the fenced value under `key` (an empty one when absent): refused when a
    /// newer writer has claimed it; done when `w` of the key's own replicas hold it, and
    /// answered with a read of the fenced value those replicas hold then, merged.
    FencedWrite {
        /// The key.
        key: Key,
        /// The claim or write.
        op: FenceOp,
        /// How many of its replicas must hold it.
        w: Level,
    },
}

impl Request {
    /// The key it is about.
    pub fn key(&self) -> &Key {
        match self {
            Self::Get { key, .. }
            | Self::Put { key, .. }
            | Self::Update { key, .. }
            | Self::FencedRead { key, .. }
            | Self::FencedWrite { key, .. } => key,
        }
    }

    /// The level it needs.
    pub fn level(&self) -> Level {
        match self {
            Self::Get { r, .. } | Self::FencedRead { r, .. } => *r,
            Self::Put { w, .. } | Self::Update { w, .. } | Self::FencedWrite { w, .. } => *w,
        }
    }

    /// Whether only the key's own replicas may count towards its level.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::FencedRead { .. } | Self::FencedWrite { .. })
    }
}

/// A request's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// What a read found.
    Read(Read),
    /// A write is held by enough replicas; the context of the written version.
    Written(VersionVector),
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// Refused before anything was written.
    #[error("{0}")]
    Refused(#[from] Refused),
    /// Fewer replicas can be reached than the level needs.
    #[error("{needed} replicas are needed, {reachable} can be reached")]
    Unavailable {
        /// What the level needs.
        needed: usize,
        /// What could be reached.
        reachable: usize,
    },
    /// Not enough replicas answered in time. A write may still have reached some of them.
    #[error(
        "{got} of the {needed} replicas needed answered within the request timeout \
         (a write may still have reached some)"
    )]
    Timeout {
        /// What the level needs.
        needed: usize,
        /// What answered.
        got: usize,
    },
    /// A replica's storage failed.
    #[error("storage: {0}")]
    Storage(String),
}

impl DataError {
    /// Why a fenced claim or write was refused, when a newer writer holds the key.
    pub fn fence_refusal(&self) -> Option<&FenceRefusal> {
        match self {
            Self::Refused(Refused::Fenced(r)) => Some(r),
            _ => None,
        }
    }
}

/// A message between stores.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// Coordinator → replica: take in `object` under `key`; `hint` names the replica this one
    /// stands in for (it keeps the write for it), `None` when it is a replica of the key. A hint
    /// that is not an address makes the write refused.
    Write {
        /// The coordinator's request.
        req: u64,
        /// The key.
        key: Key,
        /// The versions to merge.
        object: Object,
        /// The unreachable replica this write is held for, by its address
        /// (`convoke://system@host:port`).
        hint: Option<String>,
    },
    /// Replica → coordinator: the write is durable (or why not).
    WriteAck {
        /// The coordinator's request.
        req: u64,
        /// Whether it is held.
        result: Result<(), DataError>,
    },
    /// Coordinator → replica: what do you hold under `key`?
    Read {
        /// The coordinator's request.
        req: u64,
        /// The key.
        key: Key,
    },
    /// Replica → coordinator: what it holds (including writes it holds for others).
    ReadReply {
        /// The coordinator's request.
        req: u64,
        /// Its versions, if any.
        object: Option<Object>,
    },
    /// Coordinator → stale replica: take in these newer versions (no answer).
    Repair {
        /// The key.
        key: Key,
        /// The merged versions of a read.
        object: Object,
    },
    /// Anti-entropy, replica → replica: my digests of these spans of keys; answer where yours
    /// differ (with finer digests, or with your keys).
    Digests {
        /// Each span with the digest and count of the keys held in it.
        spans: Vec<SpanDigest>,
    },
    /// Anti-entropy, replica → replica: the keys I hold in `span`, each with its object's
    /// digest; I will be sent what I lack or hold differently, and will send what you do.
    Keys {
        /// The span.
        span: Span,
        /// Keys and object digests, by (hash, key).
        keys: Vec<(Key, u64)>,
    },
    /// Anti-entropy, replica → replica: send me your objects under these keys (as repairs).
    Pull {
        /// The keys.
        keys: Vec<Key>,
    },
    /// A node that is no longer a replica of these keys → a replica: take them in (answered
    /// with a `WriteAck` once durable).
    Handoff {
        /// The sender's request.
        req: u64,
        /// Keys and objects.
        entries: Vec<(Key, Object)>,
    },
    /// Coordinator → every replica, after a read in which all of them answered with the same
    /// versions, all tombstones: drop the tombstones of the versions whose digest is `digest`
    /// (keep their context).
    Reap {
        /// The key.
        key: Key,
        /// The digest of the versions every replica answered with.
        digest: u64,
    },
    /// Any node → a replica of the key: coordinate this request for me.
    Forward {
        /// The forwarding node's request.
        req: u64,
        /// The request.
        request: Request,
    },
    /// The coordinator → the node that forwarded: the request's outcome.
    ForwardReply {
        /// The forwarding node's request.
        req: u64,
        /// The outcome.
        result: Result<Reply, DataError>,
    },
    /// Replica → coordinator of a fenced write: the write is durable, and this is the fenced
    /// value the replica now holds (or why not).
    FencedAck {
        /// The coordinator's request.
        req: u64,
        /// What it holds.
        result: Result<Fenced, DataError>,
    },
    /// Node → node: the members it keeps on the ring while they are away, and the rings it
    /// remembers (see docs/data.md, "Absent holders"), so that a node that never saw them
    /// places keys, and claims them, as the others do. Addresses as `convoke://system@host:port`.
    Rings {
        /// Each absent holder's address, and how long it has been away, in milliseconds.
        absent: Vec<(String, u64)>,
        /// Each remembered ring's members, and how long ago it was replaced, in milliseconds.
        past: Vec<(Vec<String>, u64)>,
        /// Members it saw leave gracefully lately (they handed their keys over first), and how
        /// long ago, in milliseconds.
        left: Vec<(String, u64)>,
    },
}

impl Message {
    /// Its name, for logs and counters.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Write { .. } => "Write",
            Self::WriteAck { .. } => "WriteAck",
            Self::Read { .. } => "Read",
            Self::ReadReply { .. } => "ReadReply",
            Self::Repair { .. } => "Repair",
            Self::Digests { .. } => "Digests",
            Self::Keys { .. } => "Keys",
            Self::Pull { .. } => "Pull",
            Self::Handoff { .. } => "Handoff",
            Self::Reap { .. } => "Reap",
            Self::Forward { .. } => "Forward",
            Self::ForwardReply { .. } => "ForwardReply",
            Self::FencedAck { .. } => "FencedAck",
            Self::Rings { .. } => "Rings",
        }
    }
}

/// A span of key hashes with the digest and count of the keys a replica holds in it (see
/// `docs/data.md`, "Anti-entropy").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanDigest {
    /// The span.
    pub span: Span,
    /// The sum of its keys' digests.
    pub digest: u64,
    /// How many keys.
    pub count: u64,
}

/// The bytes of a message, as they travel.
pub fn encode(m: &Message) -> Vec<u8> {
    // Encoding into a growable buffer fails only for types serde cannot express, which these
    // are not; an empty frame would be dropped by the receiver.
    postcard::to_stdvec(m).unwrap_or_default()
}

/// A message from a peer's bytes; refused when they do not decode.
pub fn decode(bytes: &[u8]) -> Result<Message, postcard::Error> {
    postcard::from_bytes(bytes)
}
