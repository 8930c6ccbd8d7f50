//! Per-node traffic counters: messages and bytes sent and received, by message type, and gossip
//! payload sizes.
//!
//! Sizes are real wire sizes: the length of [`convoke_membership::wire::encode`], the protobuf
//! envelope a transport frame carries (gossip inside it gzip-compressed), without the transport's
//! own framing. Encoding a 1000-member gossip costs about a millisecond, and forming a 1000-node
//! cluster sends some 50 000 of them, so gossip sizes are reused where that is exact or close:
//!
//! - a gossip (`Arc`) a node sends again has the size it had: the copies differ only in the
//!   receiver's address, whose encoded length is the same for every simulated node (five-digit
//!   ports, uids with the top bit set);
//! - in [`SizeMode::PerVersion`] (the default), a gossip (or welcome) whose vector clock was
//!   already encoded once in that message type, by any node, is given that size. Equal clocks carry equal members, reachability and
//!   tombstones (S11), so such gossips differ only in their seen sets, a list of small integers;
//!   it is encoded again once its seen set has grown or shrunk by more than a quarter of the
//!   members since. Compare with `converge --exact-sizes` for the error (see the closing figures).
//!
//! [`SizeMode::Exact`] encodes every gossip a node has not sent before; [`SizeMode::Off`] sizes
//! nothing (the chaos runs, which report no traffic, count messages only).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};

use convoke_membership::gossip::Gossip;
use convoke_membership::message::Message;
use convoke_membership::wire;
use serde::Serialize;

/// The message types, in a fixed order.
pub const KINDS: [&str; 10] = [
    "InitJoin",
    "InitJoinAck",
    "InitJoinNack",
    "Join",
    "Welcome",
    "Gossip",
    "GossipStatus",
    "Heartbeat",
    "HeartbeatRsp",
    "ExitingConfirmed",
];

/// The index of `m`'s type in [`KINDS`].
pub fn kind_index(m: &Message) -> usize {
    match m {
        Message::InitJoin { .. } => 0,
        Message::InitJoinAck { .. } => 1,
        Message::InitJoinNack { .. } => 2,
        Message::Join { .. } => 3,
        Message::Welcome { .. } => 4,
        Message::Gossip { .. } => 5,
        Message::GossipStatus { .. } => 6,
        Message::Heartbeat { .. } => 7,
        Message::HeartbeatRsp { .. } => 8,
        Message::ExitingConfirmed { .. } => 9,
    }
}

/// A message count and its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Messages.
    pub messages: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: usize) {
        self.messages += 1;
        self.bytes += bytes as u64;
    }
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Self) {
        self.messages += o.messages;
        self.bytes += o.bytes;
    }
}

/// One node's traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Sent, by [`KINDS`] index (counted when the core emits the message, lost or not).
    pub sent: [Tally; KINDS.len()],
    /// Received, by [`KINDS`] index (counted when handed to the core).
    pub received: [Tally; KINDS.len()],
    /// The largest gossip payload (Gossip or Welcome) this node sent, in bytes.
    pub largest_gossip: u64,
    /// The number of members in that gossip.
    pub largest_gossip_members: usize,
}

impl NodeCounters {
    /// Counts a message sent.
    pub fn on_sent(&mut self, kind: usize, bytes: usize, gossip_members: Option<usize>) {
        self.sent[kind].add(bytes);
        if let Some(members) = gossip_members
            && bytes as u64 > self.largest_gossip
        {
            self.largest_gossip = bytes as u64;
            self.largest_gossip_members = members;
        }
    }

    /// Counts a message received.
    pub fn on_received(&mut self, kind: usize, bytes: usize) {
        self.received[kind].add(bytes);
    }

    /// Everything sent.
    pub fn total_sent(&self) -> Tally {
        let mut t = Tally::default();
        self.sent.iter().for_each(|k| t += *k);
        t
    }

    /// Everything received.
    pub fn total_received(&self) -> Tally {
        let mut t = Tally::default();
        self.received.iter().for_each(|k| t += *k);
        t
    }
}

/// Traffic summed over nodes, by type name, for reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TrafficReport {
    /// Sent, by message type.
    pub sent: BTreeMap<&'static str, Tally>,
    /// Received, by message type.
    pub received: BTreeMap<&'static str, Tally>,
    /// The largest gossip payload sent by any node, in bytes.
    pub largest_gossip_bytes: u64,
    /// The number of members in it.
    pub largest_gossip_members: usize,
}

impl TrafficReport {
    /// Sums `nodes`.
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a NodeCounters>) -> Self {
        let mut r = Self::default();
        for n in nodes {
            for (i, name) in KINDS.iter().enumerate() {
                *r.sent.entry(name).or_default() += n.sent[i];
                *r.received.entry(name).or_default() += n.received[i];
            }
            if n.largest_gossip > r.largest_gossip_bytes {
                r.largest_gossip_bytes = n.largest_gossip;
                r.largest_gossip_members = n.largest_gossip_members;
            }
        }
        r
    }
}

/// How gossip sizes are computed (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeMode {
    /// Encode every gossip a node has not sent before.
    Exact,
    /// Encode the first gossip of each vector clock; reuse its size for the others.
    #[default]
    PerVersion,
    /// Size nothing: every size is zero, for runs that report no traffic (the chaos runs),
    /// where encoding each message only to measure it took a tenth of the time.
    Off,
}

/// Computes wire sizes, caching the last gossip each node sent.
#[derive(Debug, Default)]
pub struct Sizer {
    mode: SizeMode,
    /// Per sending node: the last gossip version sized, and the message size it gave. The weak
    /// pointer keeps its allocation from being reused by another gossip (so a pointer match is
    /// the same gossip) without keeping its tables alive.
    last: Vec<Option<(Weak<Gossip>, usize)>>,
    /// Per message type (Gossip or Welcome) and vector clock (by hash): the size of the latest
    /// message encoded with it, and the size of its seen set.
    by_version: BTreeMap<u64, (usize, usize)>,
    /// Gossip messages encoded so far.
    pub encoded: u64,
}

impl Sizer {
    /// A sizer for `n` sending nodes.
    pub fn new(n: usize, mode: SizeMode) -> Self {
        Self { mode, last: vec![None; n], by_version: BTreeMap::new(), encoded: 0 }
    }

    /// The encoded size of `m` sent by node `from`, and the gossip's member count if it carries one.
    pub fn size(&mut self, from: usize, m: &Message) -> (usize, Option<usize>) {
        if self.mode == SizeMode::Off {
            return (0, None);
        }
        let gossip = match m {
            Message::Gossip { gossip, .. } | Message::Welcome { gossip, .. } => gossip,
            _ => return (wire::encoded_len(m), None),
        };
        if let Some((g, size)) = &self.last[from]
            && std::ptr::eq(g.as_ptr(), Arc::as_ptr(gossip))
            && matches!(m, Message::Gossip { .. })
        {
            return (*size, Some(gossip.len()));
        }
        let welcome = matches!(m, Message::Welcome { .. });
        let size = match self.mode {
            SizeMode::Off => 0,
            SizeMode::Exact => {
                self.encoded += 1;
                wire::encode(m).len()
            }
            SizeMode::PerVersion => {
                let mut h = crate::key_hasher();
                welcome.hash(&mut h);
                gossip.version().hash(&mut h);
                let seen = gossip.seen().len();
                let slack = gossip.len() / 4;
                match self.by_version.get(&h.finish()) {
                    Some(&(size, measured)) if seen.abs_diff(measured) <= slack => size,
                    _ => {
                        self.encoded += 1;
                        let size = wire::encode(m).len();
                        self.by_version.insert(h.finish(), (size, seen));
                        size
                    }
                }
            }
        };
        if !welcome {
            self.last[from] = Some((Arc::downgrade(gossip), size));
        }
        (size, Some(gossip.len()))
    }
}
