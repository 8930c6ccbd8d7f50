//! The gossip payload: the whole [`Gossip`] as index-referencing tables, gzip-compressed.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::sync::Arc;

use flate2::read::GzDecoder;
use flate2::{Compress, Compression, Crc, FlushCompress, Status};
use prost::Message as _;

use super::nodes::{
    Interner, NodeTable, decode_node_table, lookup, sorted_by_node, vclock_from_pb, vclock_to_pb,
};
use super::{DecodeError, DecodeLimits, pb};
use crate::address::UniqueAddress;
use crate::gossip::{Gossip, WallMillis};
use crate::member::{Member, MemberStatus, UpNumber, data_center_of};
use crate::reachability::{Reachability, ReachabilityStatus, Record};
use crate::version::AppVersion;

/// Encodes a gossip as the compressed payload carried by Welcome and Gossip messages.
pub fn encode_gossip(g: &Gossip) -> Vec<u8> {
    compress(&to_pb(g).encode_to_vec())
}

/// The size of a gossip's payload before and after compression, in bytes.
pub fn gossip_sizes(g: &Gossip) -> (usize, usize) {
    let raw = to_pb(g).encode_to_vec();
    (raw.len(), compress(&raw).len())
}

/// Decodes a compressed gossip payload with the [default limits](DecodeLimits::DEFAULT).
///
/// # Errors
/// When the bytes are not a valid gossip; see [`DecodeError`].
pub fn decode_gossip(bytes: &[u8]) -> Result<Gossip, DecodeError> {
    decode_gossip_with_limits(bytes, &DecodeLimits::DEFAULT)
}

/// Decodes a compressed gossip payload, refusing to decompress beyond
/// [`DecodeLimits::max_decompressed_bytes`].
///
/// # Errors
/// When the bytes are not a valid gossip or decompress to too much; see [`DecodeError`].
pub fn decode_gossip_with_limits(
    bytes: &[u8],
    limits: &DecodeLimits,
) -> Result<Gossip, DecodeError> {
    decode_uncompressed(&decompress(bytes, limits.max_decompressed_bytes)?)
}

/// Decodes an uncompressed payload.
pub(super) fn decode_uncompressed(raw: &[u8]) -> Result<Gossip, DecodeError> {
    from_pb(pb::GossipPayload::decode(raw)?)
}

/// Gzips a payload at the fastest level: a gossip is compressed once per version on every node
/// that sends it, which at a few hundred members costs more CPU than anything else a forming
/// cluster does at the default level, for a few per cent fewer bytes (docs/benchmarks.md, "250
/// nodes in one process, again"). The deflate state (a few hundred kilobytes of tables) is made
/// once per thread and reset for each payload: allocating it and touching its pages for the first
/// time cost a third of encoding a gossip of 500 members (docs/benchmarks.md, "500 nodes in one
/// process"). So every thread that has encoded a gossip keeps one for as long as it lives (the
/// runtime's worker threads, the simulator's one thread); a thread's last act must not be a gossip
/// encoded while its thread-locals are being destroyed.
pub(super) fn compress(raw: &[u8]) -> Vec<u8> {
    thread_local! {
        static DEFLATE: RefCell<Compress> = RefCell::new(Compress::new(Compression::fast(), false));
    }
    let mut out = Vec::with_capacity(GZIP_HEADER.len() + raw.len() / 2 + 64);
    out.extend_from_slice(&GZIP_HEADER);
    DEFLATE.with_borrow_mut(|deflate| {
        deflate.reset();
        loop {
            let read = usize::try_from(deflate.total_in()).expect("read at most raw.len() bytes");
            let status = deflate
                .compress_vec(&raw[read..], &mut out, FlushCompress::Finish)
                .expect("deflating from memory into memory cannot fail");
            if status == Status::StreamEnd {
                break;
            }
            out.reserve(out.capacity().max(64));
        }
    });
    let mut crc = Crc::new();
    crc.update(raw);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&crc.amount().to_le_bytes());
    out
}

/// The gzip header flate2's `GzEncoder` writes at the fastest level: magic, deflate, no flags, no
/// time, "fastest" as the extra flags, unknown operating system.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255];

fn decompress(bytes: &[u8], limit: usize) -> Result<Vec<u8>, DecodeError> {
    // Read one byte past the limit, so that reaching it is distinguishable from exceeding it.
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut raw = Vec::new();
    GzDecoder::new(bytes)
        .take(cap)
        .read_to_end(&mut raw)
        .map_err(|e| DecodeError::Decompress(e.to_string()))?;
    if raw.len() > limit {
        return Err(DecodeError::DecompressedTooLarge { limit });
    }
    Ok(raw)
}

pub(super) fn to_pb(g: &Gossip) -> pb::GossipPayload {
    let mut nodes = NodeTable::new();
    let mut roles: Interner<String> = Interner::new();
    let mut versions: Interner<String> = Interner::new();
    let members = g
        .members()
        .map(|m| pb::Member {
            node: nodes.index(m.node()),
            up_number: m.up_number().0,
            status: m.status().wire_number(),
            roles: m.roles().iter().map(|r| roles.intern(r.as_str())).collect(),
            app_version: versions.intern(m.app_version().as_str()),
        })
        .collect();
    let seen = g.seen().iter().map(|n| nodes.index(n)).collect();
    let reachability = reachability_to_pb(g.reachability(), &mut nodes);
    let version = vclock_to_pb(g.version(), &mut nodes);
    let tombstones = g
        .tombstones()
        .iter()
        .map(|(n, at)| pb::Tombstone { node: nodes.index(n), removed_at_millis: at.0 })
        .collect();
    let (all_systems, all_addresses) = nodes.finish();
    pb::GossipPayload {
        all_systems,
        all_addresses,
        all_roles: roles.into_items(),
        all_app_versions: versions.into_items(),
        members,
        seen,
        reachability,
        version,
        tombstones,
    }
}

fn reachability_to_pb(r: &Reachability, nodes: &mut NodeTable) -> Vec<pb::ObserverReachability> {
    // Every observer with rows has a version, so the versions name every observer.
    let mut observers: BTreeMap<&UniqueAddress, pb::ObserverReachability> = r
        .versions()
        .iter()
        .map(|(o, v)| {
            let row =
                pb::ObserverReachability { observer: nodes.index(o), version: *v, records: vec![] };
            (o, row)
        })
        .collect();
    for rec in r.records() {
        let record = pb::SubjectRecord {
            subject: nodes.index(&rec.subject),
            status: reachability_status_to_pb(rec.status) as i32,
            version: rec.version,
        };
        if let Some(row) = observers.get_mut(&rec.observer) {
            row.records.push(record);
        }
    }
    observers.into_values().collect()
}

fn reachability_status_to_pb(s: ReachabilityStatus) -> pb::ReachabilityStatus {
    match s {
        ReachabilityStatus::Reachable => pb::ReachabilityStatus::Reachable,
        ReachabilityStatus::Unreachable => pb::ReachabilityStatus::Unreachable,
        ReachabilityStatus::Terminated => pb::ReachabilityStatus::Terminated,
    }
}

fn reachability_status_from_pb(n: i32) -> Result<ReachabilityStatus, DecodeError> {
    match pb::ReachabilityStatus::try_from(n) {
        Ok(pb::ReachabilityStatus::Reachable) => Ok(ReachabilityStatus::Reachable),
        Ok(pb::ReachabilityStatus::Unreachable) => Ok(ReachabilityStatus::Unreachable),
        Ok(pb::ReachabilityStatus::Terminated) => Ok(ReachabilityStatus::Terminated),
        Err(_) => Err(DecodeError::UnknownReachabilityStatus(n)),
    }
}

/// A decoded role set and the data center it names, shared by the members that list it.
type SharedRoles = (Arc<BTreeSet<String>>, Arc<str>);

fn from_pb(p: pb::GossipPayload) -> Result<Gossip, DecodeError> {
    let nodes = decode_node_table(&p.all_systems, p.all_addresses)?;
    let node = |i: u32| lookup(&nodes, i, "all_addresses");
    // Members share their version and, when they list the same roles, their role set: a
    // gossip of a thousand members in one data center holds one of each, not a thousand.
    let versions: Vec<Arc<AppVersion>> =
        p.all_app_versions.iter().map(|v| Arc::new(AppVersion::parse(v))).collect();
    let mut role_sets: BTreeMap<Vec<u32>, SharedRoles> = BTreeMap::new();

    let mut members = Vec::with_capacity(p.members.len());
    for m in p.members {
        let id = node(m.node)?;
        let status = MemberStatus::from_wire_number(m.status)
            .ok_or(DecodeError::UnknownMemberStatus(m.status))?;
        let (roles, data_center) = match role_sets.get(&m.roles) {
            Some(shared) => shared.clone(),
            None => {
                let mut roles = BTreeSet::new();
                for r in &m.roles {
                    if !roles.insert(lookup(&p.all_roles, *r, "all_roles")?.clone()) {
                        return Err(DecodeError::Duplicate("member role"));
                    }
                }
                let data_center = data_center_of(&roles);
                let shared = (Arc::new(roles), data_center);
                role_sets.insert(m.roles, shared.clone());
                shared
            }
        };
        let version = lookup(&versions, m.app_version, "all_app_versions")?.clone();
        let up_number = UpNumber(m.up_number);
        members.push(Member::from_shared_parts(
            id.clone(),
            up_number,
            status,
            roles,
            data_center,
            version,
        ));
    }
    let members = sorted_by_node(members, Member::node, "member")?;

    let seen = p.seen.into_iter().map(|i| Ok(node(i)?.clone()));
    let seen = seen.collect::<Result<Vec<_>, DecodeError>>()?;
    let seen = sorted_by_node(seen, |n| n, "seen node")?.into_iter().collect();

    let mut observer_versions = BTreeMap::new();
    let mut records = Vec::new();
    for row in p.reachability {
        let observer = node(row.observer)?;
        if observer_versions.insert(observer.clone(), row.version).is_some() {
            return Err(DecodeError::Duplicate("reachability observer"));
        }
        let mut subjects = BTreeSet::new();
        for r in row.records {
            let subject = node(r.subject)?;
            if !subjects.insert(subject) {
                return Err(DecodeError::Duplicate("reachability record"));
            }
            records.push(Record {
                observer: observer.clone(),
                subject: subject.clone(),
                status: reachability_status_from_pb(r.status)?,
                version: r.version,
            });
        }
    }
    let reachability = Reachability::from_parts(records, observer_versions);

    let version = vclock_from_pb(p.version, &nodes)?;

    let mut tombstones = BTreeMap::new();
    for t in p.tombstones {
        if tombstones.insert(node(t.node)?.clone(), WallMillis(t.removed_at_millis)).is_some() {
            return Err(DecodeError::Duplicate("tombstone"));
        }
    }

    let gossip = Gossip::from_parts(members, seen, reachability, version, tombstones);
    gossip.check_invariants()?;
    Ok(gossip)
}
