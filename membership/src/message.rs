//! The protocol messages between cluster cores. [`crate::wire`] encodes them as protobuf.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::{Address, UniqueAddress};
use std::sync::Arc;

use crate::gossip::Gossip;
use crate::vclock::VectorClock;
use crate::version::AppVersion;

/// The answer of a seed to a joiner's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigCheck {
    /// The seed did not check.
    Unchecked,
    /// Compatible; the seed's values for the keys the joiner sent.
    Compatible(BTreeMap<String, String>),
    /// Incompatible (the reason is logged on the seed).
    Incompatible,
    /// The joiner sent no configuration to check.
    UnsupportedByJoiningNode,
}

/// A message between two cluster cores.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A joiner asks a seed whether it is part of a cluster, sending the keys that must agree.
    InitJoin {
        /// The joiner's compatibility-relevant configuration.
        config: BTreeMap<String, String>,
    },
    /// A seed that is part of a cluster answers InitJoin.
    InitJoinAck {
        /// The seed's address.
        address: Address,
        /// The result of the configuration check.
        config_check: ConfigCheck,
    },
    /// A seed that is not (yet) part of a cluster answers InitJoin.
    InitJoinNack {
        /// The seed's address.
        address: Address,
    },
    /// A joiner asks a member to add it.
    Join {
        /// The joiner.
        node: UniqueAddress,
        /// Its roles, including its `dc-` role.
        roles: BTreeSet<String>,
        /// Its application version.
        app_version: AppVersion,
    },
    /// A member admits a joiner and hands it the gossip.
    Welcome {
        /// The member.
        from: UniqueAddress,
        /// Its current gossip.
        gossip: Arc<Gossip>,
    },
    /// The full state.
    Gossip {
        /// The sender.
        from: UniqueAddress,
        /// The intended receiver (a different uid is a previous incarnation: dropped).
        to: UniqueAddress,
        /// The gossip (shared: the same version goes to many peers).
        gossip: Arc<Gossip>,
    },
    /// A cheap "this is what I have" probe.
    GossipStatus {
        /// The sender.
        from: UniqueAddress,
        /// The sender's gossip version.
        version: VectorClock,
        /// The digest of the sender's seen set.
        seen_digest: Vec<u8>,
    },
    /// A heartbeat request.
    Heartbeat {
        /// The sender.
        from: UniqueAddress,
        /// Increments per heartbeat tick; the sender measures round trips by it.
        sequence_nr: u64,
    },
    /// The answer to a heartbeat.
    HeartbeatRsp {
        /// The responder.
        from: UniqueAddress,
        /// The request's sequence number.
        sequence_nr: u64,
    },
    /// A node that finished exiting tells the leaders it may be removed.
    ExitingConfirmed {
        /// The exited node.
        node: UniqueAddress,
    },
}

impl Message {
    /// A short name for logs and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InitJoin { .. } => "InitJoin",
            Self::InitJoinAck { .. } => "InitJoinAck",
            Self::InitJoinNack { .. } => "InitJoinNack",
            Self::Join { .. } => "Join",
            Self::Welcome { .. } => "Welcome",
            Self::Gossip { .. } => "Gossip",
            Self::GossipStatus { .. } => "GossipStatus",
            Self::Heartbeat { .. } => "Heartbeat",
            Self::HeartbeatRsp { .. } => "HeartbeatRsp",
            Self::ExitingConfirmed { .. } => "ExitingConfirmed",
        }
    }

    /// The node the message says it comes from, when it names one: a core only accepts a
    /// message whose named sender is the node the transport authenticated it as.
    pub fn claimed_sender(&self) -> Option<&UniqueAddress> {
        match self {
            Self::Join { node, .. } | Self::ExitingConfirmed { node } => Some(node),
            Self::Welcome { from, .. }
            | Self::Gossip { from, .. }
            | Self::GossipStatus { from, .. }
            | Self::Heartbeat { from, .. }
            | Self::HeartbeatRsp { from, .. } => Some(from),
            Self::InitJoin { .. } | Self::InitJoinAck { .. } | Self::InitJoinNack { .. } => None,
        }
    }

    /// The address the message says it comes from, when it names one.
    pub fn claimed_address(&self) -> Option<&Address> {
        match self {
            Self::InitJoinAck { address, .. } | Self::InitJoinNack { address } => Some(address),
            _ => self.claimed_sender().map(|n| &n.address),
        }
    }

    /// Whether it is a heartbeat or heartbeat response, which a transport must never queue behind
    /// large frames or drop first.
    pub fn is_heartbeat(&self) -> bool {
        matches!(self, Self::Heartbeat { .. } | Self::HeartbeatRsp { .. })
    }
}

/// A message the core wants sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Transmit {
    /// Where to.
    pub to: Address,
    /// What.
    pub message: Message,
}
