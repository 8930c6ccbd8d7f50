//! Each [`Message`] variant to and from its `Envelope` kind.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::nodes::{
    NodeTable, address_from_pb, address_to_pb, decode_node_table, unique_from_pb, unique_to_pb,
    vclock_from_pb, vclock_to_pb,
};
use super::payload::{decode_gossip_with_limits, encode_gossip};
use super::pb::envelope::Kind;
use super::pb::init_join_ack::{self, ConfigCheck as PbConfigCheck};
use super::{DecodeError, DecodeLimits, pb};
use crate::address::UniqueAddress;
use crate::gossip::Gossip;
use crate::message::{ConfigCheck, Message};
use crate::version::AppVersion;

pub(super) fn to_pb(msg: &Message) -> pb::Envelope {
    to_pb_with(msg, Sender::Included, &mut |g| encode_gossip(g))
}

/// Whether the messages that name their own sender (heartbeats, their responses and gossip
/// status) carry it, or leave it to the connection whose handshake names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sender {
    Included,
    LeftToConnection,
}

/// Like [`to_pb`], with the gossip payloads made by `payload` (which may reuse an earlier one).
pub(super) fn to_pb_with(
    msg: &Message,
    sender: Sender,
    payload: &mut dyn FnMut(&Arc<Gossip>) -> Vec<u8>,
) -> pb::Envelope {
    let sender_pb = |from| (sender == Sender::Included).then(|| unique_to_pb(from));
    let kind = match msg {
        Message::InitJoin { config } => Kind::InitJoin(pb::InitJoin { config: config.clone() }),
        Message::InitJoinAck { address, config_check } => Kind::InitJoinAck(pb::InitJoinAck {
            address: Some(address_to_pb(address)),
            config_check: Some(config_check_to_pb(config_check)),
        }),
        Message::InitJoinNack { address } => {
            Kind::InitJoinNack(pb::InitJoinNack { address: Some(address_to_pb(address)) })
        }
        Message::Join { node, roles, app_version } => Kind::Join(pb::Join {
            node: Some(unique_to_pb(node)),
            roles: roles.iter().cloned().collect(),
            app_version: app_version.as_str().to_owned(),
        }),
        Message::Welcome { from, gossip } => {
            Kind::Welcome(pb::Welcome { from: Some(unique_to_pb(from)), gossip: payload(gossip) })
        }
        Message::Gossip { from, to, gossip } => Kind::Gossip(pb::GossipEnvelope {
            from: Some(unique_to_pb(from)),
            to: Some(unique_to_pb(to)),
            gossip: payload(gossip),
        }),
        Message::GossipStatus { from, version, seen_digest } => {
            let mut nodes = NodeTable::new();
            let version = vclock_to_pb(version, &mut nodes);
            let (all_systems, all_addresses) = nodes.finish();
            Kind::GossipStatus(pb::GossipStatus {
                from: sender_pb(from),
                all_systems,
                all_addresses,
                version,
                seen_digest: seen_digest.clone(),
            })
        }
        // Field 3 (a creation time, echoed back) is left at its default, which costs no bytes:
        // round trips are measured by sequence number (docs/benchmarks.md, "Steady traffic").
        Message::Heartbeat { from, sequence_nr } => Kind::Heartbeat(pb::Heartbeat {
            from: sender_pb(from),
            sequence_nr: *sequence_nr,
            creation_time_nanos: 0,
        }),
        Message::HeartbeatRsp { from, sequence_nr } => Kind::HeartbeatRsp(pb::HeartbeatRsp {
            from: sender_pb(from),
            sequence_nr: *sequence_nr,
            creation_time_nanos: 0,
        }),
        Message::ExitingConfirmed { node } => {
            Kind::ExitingConfirmed(pb::ExitingConfirmed { node: Some(unique_to_pb(node)) })
        }
    };
    pb::Envelope { kind: Some(kind) }
}

fn config_check_to_pb(c: &ConfigCheck) -> PbConfigCheck {
    match c {
        ConfigCheck::Unchecked => PbConfigCheck::Unchecked(init_join_ack::Unchecked {}),
        ConfigCheck::Compatible(config) => {
            PbConfigCheck::Compatible(init_join_ack::Compatible { config: config.clone() })
        }
        ConfigCheck::Incompatible => PbConfigCheck::Incompatible(init_join_ack::Incompatible {}),
        ConfigCheck::UnsupportedByJoiningNode => {
            PbConfigCheck::UnsupportedByJoiningNode(init_join_ack::UnsupportedByJoiningNode {})
        }
    }
}

/// Decodes an envelope. `connection` is the sender named by the handshake of the connection the
/// envelope came on, if any: it stands in for a sender the message leaves out.
pub(super) fn from_pb(
    env: pb::Envelope,
    limits: &DecodeLimits,
    connection: Option<&UniqueAddress>,
) -> Result<Message, DecodeError> {
    let sender = |from: Option<pb::UniqueAddress>, field| match (from, connection) {
        (None, Some(c)) => Ok(c.clone()),
        (from, _) => unique_from_pb(from, field),
    };
    let kind = env.kind.ok_or(DecodeError::MissingField("Envelope.kind"))?;
    Ok(match kind {
        Kind::InitJoin(m) => Message::InitJoin { config: m.config },
        Kind::InitJoinAck(m) => Message::InitJoinAck {
            address: address_from_pb(m.address, "InitJoinAck.address")?,
            config_check: match m
                .config_check
                .ok_or(DecodeError::MissingField("InitJoinAck.config_check"))?
            {
                PbConfigCheck::Unchecked(_) => ConfigCheck::Unchecked,
                PbConfigCheck::Compatible(c) => ConfigCheck::Compatible(c.config),
                PbConfigCheck::Incompatible(_) => ConfigCheck::Incompatible,
                PbConfigCheck::UnsupportedByJoiningNode(_) => ConfigCheck::UnsupportedByJoiningNode,
            },
        },
        Kind::InitJoinNack(m) => {
            Message::InitJoinNack { address: address_from_pb(m.address, "InitJoinNack.address")? }
        }
        Kind::Join(m) => {
            let node = unique_from_pb(m.node, "Join.node")?;
            let count = m.roles.len();
            let roles: BTreeSet<String> = m.roles.into_iter().collect();
            if roles.len() != count {
                return Err(DecodeError::Duplicate("Join role"));
            }
            Message::Join { node, roles, app_version: AppVersion::parse(&m.app_version) }
        }
        Kind::Welcome(m) => Message::Welcome {
            from: unique_from_pb(m.from, "Welcome.from")?,
            gossip: gossip(&m.gossip, "Welcome.gossip", limits)?,
        },
        Kind::Gossip(m) => Message::Gossip {
            from: unique_from_pb(m.from, "GossipEnvelope.from")?,
            to: unique_from_pb(m.to, "GossipEnvelope.to")?,
            gossip: gossip(&m.gossip, "GossipEnvelope.gossip", limits)?,
        },
        Kind::GossipStatus(m) => {
            let from = sender(m.from, "GossipStatus.from")?;
            let nodes = decode_node_table(&m.all_systems, m.all_addresses)?;
            let version = vclock_from_pb(m.version, &nodes)?;
            Message::GossipStatus { from, version, seen_digest: m.seen_digest }
        }
        Kind::Heartbeat(m) => Message::Heartbeat {
            from: sender(m.from, "Heartbeat.from")?,
            sequence_nr: m.sequence_nr,
        },
        Kind::HeartbeatRsp(m) => Message::HeartbeatRsp {
            from: sender(m.from, "HeartbeatRsp.from")?,
            sequence_nr: m.sequence_nr,
        },
        Kind::ExitingConfirmed(m) => {
            Message::ExitingConfirmed { node: unique_from_pb(m.node, "ExitingConfirmed.node")? }
        }
    })
}

/// A gossip field: never empty, since even an empty gossip compresses to a gzip header.
fn gossip(
    bytes: &[u8],
    field: &'static str,
    limits: &DecodeLimits,
) -> Result<Arc<Gossip>, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::MissingField(field));
    }
    decode_gossip_with_limits(bytes, limits).map(Arc::new)
}
