//! What the regions, coordinators and replicas of one entity type send each other, as it travels
//! on the messaging endpoint `convoke.sharding/<type>` (postcard-encoded, like every message).
//!
//! The sans-IO messages carry [`UniqueAddress`]es and shared tables; these mirrors carry plain
//! strings and numbers, and are checked when they come in: a node address that does not parse or
//! a zero uid makes the whole frame count as undecodable and be dropped.
//!
//! The mirror types are public because [`Frame`] carries them out of the sans-IO
//! [`Host`](super::Host) to the driver that sends it; their fields are private to this crate, so
//! a frame is built only by the machines and read only through [`Decoded`].

use std::sync::Arc;

use super::{
    Ballot, CoordinatorMsg, CoordinatorState, RegionMsg, ReplicaMsg, ShardId, StateVersion,
};
use convoke_membership::{Address, Uid, UniqueAddress};
use serde::{Deserialize, Serialize};

/// One frame on an entity type's endpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Frame {
    /// Region → coordinator.
    ToCoordinator(WireCoordinatorMsg),
    /// Coordinator → region.
    ToRegion(WireRegionMsg),
    /// Coordinator → replica, and replica → coordinator.
    Replica(WireReplicaMsg),
    /// A message for an entity, forwarded by a region to the region hosting its shard.
    Entity(WireEnvelope),
    /// The answer to an ask, sent to the node the ask came from.
    Reply(WireReply),
}

impl Frame {
    /// The message's name, for logs, counters and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ToCoordinator(m) => match m {
                WireCoordinatorMsg::Register(_) => "Register",
                WireCoordinatorMsg::RegisterProxy => "RegisterProxy",
                WireCoordinatorMsg::GetShardHome(_) => "GetShardHome",
                WireCoordinatorMsg::ShardStarted(_) => "ShardStarted",
                WireCoordinatorMsg::BeginHandOffAck(_) => "BeginHandOffAck",
                WireCoordinatorMsg::ShardStopped(_) => "ShardStopped",
                WireCoordinatorMsg::GracefulShutdownReq => "GracefulShutdownReq",
                WireCoordinatorMsg::RegionStopped => "RegionStopped",
            },
            Self::ToRegion(m) => match m {
                WireRegionMsg::RegisterAck => "RegisterAck",
                WireRegionMsg::ShardHome { .. } => "ShardHome",
                WireRegionMsg::ShardHomes(_) => "ShardHomes",
                WireRegionMsg::HostShard(_) => "HostShard",
                WireRegionMsg::BeginHandOff(_) => "BeginHandOff",
                WireRegionMsg::HandOff(_) => "HandOff",
                WireRegionMsg::RegisterAgain => "RegisterAgain",
            },
            Self::Replica(m) => match m {
                WireReplicaMsg::Read { .. } => "Read",
                WireReplicaMsg::ReadReply { .. } => "ReadReply",
                WireReplicaMsg::Write { .. } => "Write",
                WireReplicaMsg::WriteAck { .. } => "WriteAck",
                WireReplicaMsg::Rejected { .. } => "Rejected",
            },
            Self::Entity(_) => "Entity",
            Self::Reply(_) => "Reply",
        }
    }
}

/// A node: address parts and incarnation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct WireNode {
    system: String,
    host: String,
    port: u16,
    uid: u64,
}

impl From<&UniqueAddress> for WireNode {
    fn from(n: &UniqueAddress) -> Self {
        Self {
            system: n.address.system().to_owned(),
            host: n.address.host().to_owned(),
            port: n.address.port(),
            uid: n.uid.get(),
        }
    }
}

impl TryFrom<WireNode> for UniqueAddress {
    type Error = String;

    fn try_from(w: WireNode) -> Result<Self, String> {
        let address = Address::new(&w.system, &w.host, w.port).map_err(|e| e.to_string())?;
        let uid = Uid::new(w.uid).ok_or("a node uid of 0")?;
        Ok(UniqueAddress::new(address, uid))
    }
}

fn node(w: WireNode) -> Result<UniqueAddress, String> {
    UniqueAddress::try_from(w)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum WireCoordinatorMsg {
    Register(Vec<String>),
    RegisterProxy,
    GetShardHome(String),
    ShardStarted(String),
    BeginHandOffAck(String),
    ShardStopped(String),
    GracefulShutdownReq,
    RegionStopped,
}

impl From<&CoordinatorMsg> for WireCoordinatorMsg {
    fn from(m: &CoordinatorMsg) -> Self {
        match m {
            CoordinatorMsg::Register { hosted } => {
                Self::Register(hosted.iter().map(ToString::to_string).collect())
            }
            CoordinatorMsg::RegisterProxy => Self::RegisterProxy,
            CoordinatorMsg::GetShardHome(s) => Self::GetShardHome(s.to_string()),
            CoordinatorMsg::ShardStarted(s) => Self::ShardStarted(s.to_string()),
            CoordinatorMsg::BeginHandOffAck(s) => Self::BeginHandOffAck(s.to_string()),
            CoordinatorMsg::ShardStopped(s) => Self::ShardStopped(s.to_string()),
            CoordinatorMsg::GracefulShutdownReq => Self::GracefulShutdownReq,
            CoordinatorMsg::RegionStopped => Self::RegionStopped,
        }
    }
}

impl From<WireCoordinatorMsg> for CoordinatorMsg {
    fn from(m: WireCoordinatorMsg) -> Self {
        let id = |s: String| ShardId::new(s);
        match m {
            WireCoordinatorMsg::Register(hosted) => {
                Self::Register { hosted: hosted.into_iter().map(id).collect() }
            }
            WireCoordinatorMsg::RegisterProxy => Self::RegisterProxy,
            WireCoordinatorMsg::GetShardHome(s) => Self::GetShardHome(id(s)),
            WireCoordinatorMsg::ShardStarted(s) => Self::ShardStarted(id(s)),
            WireCoordinatorMsg::BeginHandOffAck(s) => Self::BeginHandOffAck(id(s)),
            WireCoordinatorMsg::ShardStopped(s) => Self::ShardStopped(id(s)),
            WireCoordinatorMsg::GracefulShutdownReq => Self::GracefulShutdownReq,
            WireCoordinatorMsg::RegionStopped => Self::RegionStopped,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum WireRegionMsg {
    RegisterAck,
    ShardHome { shard: String, region: WireNode },
    ShardHomes(Vec<(String, WireNode)>),
    HostShard(String),
    BeginHandOff(String),
    HandOff(String),
    // New variants go last: postcard encodes a variant by its index.
    RegisterAgain,
}

impl From<&RegionMsg> for WireRegionMsg {
    fn from(m: &RegionMsg) -> Self {
        match m {
            RegionMsg::RegisterAck => Self::RegisterAck,
            RegionMsg::RegisterAgain => Self::RegisterAgain,
            RegionMsg::ShardHome { shard, region } => {
                Self::ShardHome { shard: shard.to_string(), region: region.into() }
            }
            RegionMsg::ShardHomes(homes) => {
                Self::ShardHomes(homes.iter().map(|(s, r)| (s.to_string(), r.into())).collect())
            }
            RegionMsg::HostShard(s) => Self::HostShard(s.to_string()),
            RegionMsg::BeginHandOff(s) => Self::BeginHandOff(s.to_string()),
            RegionMsg::HandOff(s) => Self::HandOff(s.to_string()),
        }
    }
}

impl TryFrom<WireRegionMsg> for RegionMsg {
    type Error = String;

    fn try_from(m: WireRegionMsg) -> Result<Self, String> {
        let id = |s: String| ShardId::new(s);
        Ok(match m {
            WireRegionMsg::RegisterAck => Self::RegisterAck,
            WireRegionMsg::RegisterAgain => Self::RegisterAgain,
            WireRegionMsg::ShardHome { shard, region } => {
                Self::ShardHome { shard: id(shard), region: node(region)? }
            }
            WireRegionMsg::ShardHomes(homes) => Self::ShardHomes(
                homes
                    .into_iter()
                    .map(|(s, r)| Ok((id(s), node(r)?)))
                    .collect::<Result<_, String>>()?,
            ),
            WireRegionMsg::HostShard(s) => Self::HostShard(id(s)),
            WireRegionMsg::BeginHandOff(s) => Self::BeginHandOff(id(s)),
            WireRegionMsg::HandOff(s) => Self::HandOff(id(s)),
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct WireBallot {
    round: u64,
    node: WireNode,
    instance: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct WireVersion {
    ballot: WireBallot,
    seq: u64,
}

/// A coordinator table: each region with its shards in allocation order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireState {
    regions: Vec<(WireNode, Vec<String>)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum WireReplicaMsg {
    Read { ballot: WireBallot },
    ReadReply { ballot: WireBallot, accepted: Option<(WireVersion, WireState)> },
    Write { version: WireVersion, state: WireState },
    WriteAck { version: WireVersion },
    Rejected { promised: WireBallot },
}

fn ballot_out(b: &Ballot) -> WireBallot {
    WireBallot { round: b.round, node: (&b.node).into(), instance: b.instance }
}

fn ballot_in(b: WireBallot) -> Result<Ballot, String> {
    Ok(Ballot { round: b.round, node: node(b.node)?, instance: b.instance })
}

fn version_out(v: &StateVersion) -> WireVersion {
    WireVersion { ballot: ballot_out(&v.ballot), seq: v.seq }
}

fn version_in(v: WireVersion) -> Result<StateVersion, String> {
    Ok(StateVersion { ballot: ballot_in(v.ballot)?, seq: v.seq })
}

fn state_out(s: &CoordinatorState) -> WireState {
    WireState {
        regions: s
            .regions()
            .map(|(r, shards)| (r.into(), shards.iter().map(ToString::to_string).collect()))
            .collect(),
    }
}

fn state_in(s: WireState) -> Result<Arc<CoordinatorState>, String> {
    let mut regions = Vec::with_capacity(s.regions.len());
    let mut shards = Vec::new();
    for (r, list) in s.regions {
        let r = node(r)?;
        shards.extend(list.into_iter().map(|id| (ShardId::new(id), r.clone())));
        regions.push(r);
    }
    Ok(Arc::new(CoordinatorState::from_parts(regions, shards)))
}

impl From<&ReplicaMsg> for WireReplicaMsg {
    fn from(m: &ReplicaMsg) -> Self {
        match m {
            ReplicaMsg::Read { ballot } => Self::Read { ballot: ballot_out(ballot) },
            ReplicaMsg::ReadReply { ballot, accepted } => Self::ReadReply {
                ballot: ballot_out(ballot),
                accepted: accepted.as_ref().map(|(v, s)| (version_out(v), state_out(s))),
            },
            ReplicaMsg::Write { version, state } => {
                Self::Write { version: version_out(version), state: state_out(state) }
            }
            ReplicaMsg::WriteAck { version } => Self::WriteAck { version: version_out(version) },
            ReplicaMsg::Rejected { promised } => Self::Rejected { promised: ballot_out(promised) },
        }
    }
}

impl TryFrom<WireReplicaMsg> for ReplicaMsg {
    type Error = String;

    fn try_from(m: WireReplicaMsg) -> Result<Self, String> {
        Ok(match m {
            WireReplicaMsg::Read { ballot } => Self::Read { ballot: ballot_in(ballot)? },
            WireReplicaMsg::ReadReply { ballot, accepted } => Self::ReadReply {
                ballot: ballot_in(ballot)?,
                accepted: match accepted {
                    Some((v, s)) => Some((version_in(v)?, state_in(s)?)),
                    None => None,
                },
            },
            WireReplicaMsg::Write { version, state } => {
                Self::Write { version: version_in(version)?, state: state_in(state)? }
            }
            WireReplicaMsg::WriteAck { version } => {
                Self::WriteAck { version: version_in(version)? }
            }
            WireReplicaMsg::Rejected { promised } => {
                Self::Rejected { promised: ballot_in(promised)? }
            }
        })
    }
}

/// A message for an entity.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireEnvelope {
    pub(super) shard: String,
    pub(super) entity: String,
    /// The user's message, postcard-encoded.
    pub(super) payload: Vec<u8>,
    /// Where the answer goes, for an ask.
    pub(super) reply_to: Option<(WireNode, u64)>,
}

/// The answer to an ask.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireReply {
    pub(super) id: u64,
    pub(super) result: Result<Vec<u8>, WireFailure>,
}

/// Why an ask got no answer from its entity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum WireFailure {
    BufferFull,
    HandedOff,
    RegionStopped,
    MailboxFull(String),
    BadMessage(String),
    EntityFailed(String),
    Unreachable(String),
}

/// A frame from a peer as a region takes it in: every node, ballot and table checked and turned
/// into the sans-IO crate's types. Public (hidden) only for the fuzz target.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Decoded {
    ToCoordinator(CoordinatorMsg),
    ToRegion(RegionMsg),
    Replica(ReplicaMsg),
    Entity {
        shard: ShardId,
        entity: String,
        payload: Vec<u8>,
        reply_to: Option<(UniqueAddress, u64)>,
    },
    Reply {
        id: u64,
        result: Result<Vec<u8>, WireFailure>,
    },
}

impl TryFrom<Frame> for Decoded {
    type Error = String;

    fn try_from(frame: Frame) -> Result<Self, String> {
        Ok(match frame {
            Frame::ToCoordinator(m) => Self::ToCoordinator(m.into()),
            Frame::ToRegion(m) => Self::ToRegion(m.try_into()?),
            Frame::Replica(m) => Self::Replica(m.try_into()?),
            Frame::Entity(w) => Self::Entity {
                shard: ShardId::new(w.shard),
                entity: w.entity,
                payload: w.payload,
                reply_to: match w.reply_to {
                    Some((n, id)) => {
                        Some((node(n).map_err(|e| format!("a reply address: {e}"))?, id))
                    }
                    None => None,
                },
            },
            Frame::Reply(r) => Self::Reply { id: r.id, result: r.result },
        })
    }
}

impl From<&Decoded> for Frame {
    fn from(d: &Decoded) -> Self {
        match d {
            Decoded::ToCoordinator(m) => Self::ToCoordinator(m.into()),
            Decoded::ToRegion(m) => Self::ToRegion(m.into()),
            Decoded::Replica(m) => Self::Replica(m.into()),
            Decoded::Entity { shard, entity, payload, reply_to } => Self::Entity(WireEnvelope {
                shard: shard.to_string(),
                entity: entity.clone(),
                payload: payload.clone(),
                reply_to: reply_to.as_ref().map(|(n, id)| (n.into(), *id)),
            }),
            Decoded::Reply { id, result } => {
                Self::Reply(WireReply { id: *id, result: result.clone() })
            }
        }
    }
}

/// Decodes the bytes of one frame from a peer as the entity type's endpoint and region do:
/// postcard, then the checks of [`Decoded`].
///
/// # Errors
/// The bytes are not a frame, or a node in it is not a valid address.
#[doc(hidden)]
pub fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    let frame: Frame = postcard::from_bytes(bytes).map_err(|e| e.to_string())?;
    Decoded::try_from(frame)
}

/// The bytes of `frame` as they travel: postcard, as the messaging layer encodes it.
pub fn to_bytes(frame: &Frame) -> Vec<u8> {
    // A frame is strings, numbers and vectors: postcard cannot fail on it.
    postcard::to_stdvec(frame).unwrap_or_default()
}

/// The frame in `bytes` (postcard); its nodes are checked when the [`Host`](super::Host) takes
/// it in.
///
/// # Errors
/// The bytes are not a frame.
pub fn from_bytes(bytes: &[u8]) -> Result<Frame, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}

/// Encodes `d` as the frame a region sends.
#[doc(hidden)]
pub fn encode(d: &Decoded) -> Vec<u8> {
    // A frame is strings, numbers and vectors: postcard cannot fail on it.
    postcard::to_stdvec(&Frame::from(d)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "10.0.0.1", port).unwrap(), Uid::new(7).unwrap())
    }

    #[test]
    fn a_table_travels_and_comes_back_the_same() {
        let state = CoordinatorState::from_parts(
            [n(1), n(2), n(3)],
            [("a".into(), n(1)), ("b".into(), n(2)), ("c".into(), n(1))],
        );
        let version = StateVersion { ballot: Ballot { round: 3, node: n(2), instance: 4 }, seq: 9 };
        let msg = ReplicaMsg::Write { version: version.clone(), state: Arc::new(state.clone()) };
        let bytes = postcard::to_stdvec(&Frame::Replica((&msg).into())).unwrap();
        let Frame::Replica(wire) = postcard::from_bytes(&bytes).unwrap() else { panic!() };
        let back = ReplicaMsg::try_from(wire).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn every_region_message_travels_and_comes_back_the_same() {
        let shard = || ShardId::new("7");
        let all = [
            RegionMsg::RegisterAck,
            RegionMsg::RegisterAgain,
            RegionMsg::ShardHome { shard: shard(), region: n(2) },
            RegionMsg::ShardHomes(vec![(shard(), n(1)), (ShardId::new("8"), n(3))]),
            RegionMsg::HostShard(shard()),
            RegionMsg::BeginHandOff(shard()),
            RegionMsg::HandOff(shard()),
        ];
        for msg in all {
            let bytes = postcard::to_stdvec(&Frame::ToRegion((&msg).into())).unwrap();
            let Frame::ToRegion(wire) = postcard::from_bytes(&bytes).unwrap() else { panic!() };
            assert_eq!(RegionMsg::try_from(wire).unwrap(), msg);
        }
    }

    #[test]
    fn a_frame_decodes_as_the_region_takes_it_and_encodes_back() {
        let d = Decoded::Entity {
            shard: ShardId::new("3"),
            entity: "e".to_owned(),
            payload: vec![1, 2],
            reply_to: Some((n(4), 9)),
        };
        let bytes = encode(&d);
        assert_eq!(decode(&bytes), Ok(d));
        let mut bad = Frame::from(&Decoded::ToRegion(RegionMsg::HandOff(ShardId::new("1"))));
        if let Frame::ToRegion(WireRegionMsg::HandOff(s)) = &mut bad {
            s.push('x');
        }
        let mut zero = WireNode::from(&n(1));
        zero.uid = 0;
        let homed = Frame::ToRegion(WireRegionMsg::ShardHome { shard: "1".into(), region: zero });
        let err = decode(&postcard::to_stdvec(&homed).unwrap()).unwrap_err();
        assert!(err.contains("uid of 0"), "{err}");
        assert!(decode(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn a_node_with_a_zero_uid_or_a_bad_host_is_refused() {
        let mut w = WireNode::from(&n(1));
        w.uid = 0;
        assert!(UniqueAddress::try_from(w).is_err());
        let mut w = WireNode::from(&n(1));
        w.host = String::new();
        assert!(UniqueAddress::try_from(w).is_err());
    }
}
