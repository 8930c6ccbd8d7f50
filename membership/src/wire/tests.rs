use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;

use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use prost::Message as _;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::payload::{compress, decode_uncompressed, to_pb};
use super::*;
use crate::address::{Address, Uid, UniqueAddress};
use crate::gossip::{Gossip, WallMillis};
use crate::member::{Member, MemberStatus, UpNumber};
use crate::message::ConfigCheck;
use crate::reachability::Reachability;
use crate::vclock::VectorClock;
use crate::version::AppVersion;

// ---------------------------------------------------------------------------------------------
// Generators of valid values.

fn arb_address() -> impl Strategy<Value = Address> {
    let host = prop_oneof![
        "[a-z0-9.-]{1,12}",
        "10\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
        "fe80::[0-9a-f]{1,4}",
    ];
    ("[A-Za-z0-9_-]{1,8}", host, any::<u16>())
        .prop_map(|(system, host, port)| Address::new(system, host, port).unwrap())
}

fn arb_node() -> impl Strategy<Value = UniqueAddress> {
    (arb_address(), 1..=u64::MAX).prop_map(|(a, uid)| UniqueAddress::new(a, Uid::new(uid).unwrap()))
}

fn arb_config() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(".{0,12}", ".{0,12}", 0..4)
}

fn arb_roles() -> impl Strategy<Value = BTreeSet<String>> {
    prop::collection::btree_set(prop_oneof!["dc-[a-z]{1,6}", ".{0,8}"], 0..4)
}

fn arb_app_version() -> impl Strategy<Value = AppVersion> {
    prop_oneof![
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
        "[0-9]\\.[0-9]\\.[0-9]-RC[0-9]",
        "[0-9]\\.[0-9]\\.[0-9]\\+[0-9]{1,2}-[0-9a-f]{8}",
        ".{0,8}",
    ]
    .prop_map(|s| AppVersion::parse(&s))
}

fn arb_status() -> impl Strategy<Value = MemberStatus> {
    prop::sample::select(
        MemberStatus::ALL.into_iter().filter(|s| *s != MemberStatus::Removed).collect::<Vec<_>>(),
    )
}

/// A valid gossip: members with any status but Removed; reachability built through the table's
/// own operations between members; vector-clock entries and seen only for members; tombstones only
/// for non-members.
fn arb_gossip() -> impl Strategy<Value = Gossip> {
    let member_fields = (arb_status(), any::<u32>(), arb_roles(), arb_app_version());
    (
        prop::collection::btree_set(arb_node(), 0..8),
        prop::collection::vec(member_fields, 8),
        prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0u8..3),
            0..10,
        ),
        prop::collection::vec(prop_oneof![Just(0u64), 1u64..100, any::<u64>()], 8),
        prop::collection::vec(any::<bool>(), 8),
        prop::collection::btree_map(arb_node(), any::<u64>().prop_map(WallMillis), 0..3),
    )
        .prop_map(|(nodes, fields, ops, counters, seen, tombstones)| {
            let nodes: Vec<UniqueAddress> = nodes.into_iter().collect();
            let members = nodes.iter().zip(&fields).map(|(n, (status, up, roles, version))| {
                Member::from_parts(
                    n.clone(),
                    UpNumber(*up),
                    *status,
                    roles.clone(),
                    version.clone(),
                )
            });
            let mut reachability = Reachability::new();
            if !nodes.is_empty() {
                for (o, s, kind) in ops {
                    let (o, s) = (o.get(&nodes), s.get(&nodes));
                    match kind {
                        0 => reachability.reachable(o, s),
                        1 => reachability.unreachable(o, s),
                        _ => reachability.terminated(o, s),
                    }
                }
            }
            let version =
                VectorClock::from_entries(nodes.iter().cloned().zip(counters.iter().copied()));
            let seen =
                nodes.iter().zip(&seen).filter(|(_, s)| **s).map(|(n, _)| n.clone()).collect();
            let tombstones = tombstones.into_iter().filter(|(n, _)| !nodes.contains(n)).collect();
            let g = Gossip::from_parts(members, seen, reachability, version, tombstones);
            g.check_invariants().unwrap();
            g
        })
}

fn arb_config_check() -> impl Strategy<Value = ConfigCheck> {
    prop_oneof![
        Just(ConfigCheck::Unchecked),
        arb_config().prop_map(ConfigCheck::Compatible),
        Just(ConfigCheck::Incompatible),
        Just(ConfigCheck::UnsupportedByJoiningNode),
    ]
}

fn arb_clock() -> impl Strategy<Value = VectorClock> {
    prop::collection::btree_map(arb_node(), any::<u64>(), 0..6).prop_map(VectorClock::from_entries)
}

fn arb_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        arb_config().prop_map(|config| Message::InitJoin { config }),
        (arb_address(), arb_config_check())
            .prop_map(|(address, config_check)| Message::InitJoinAck { address, config_check }),
        arb_address().prop_map(|address| Message::InitJoinNack { address }),
        (arb_node(), arb_roles(), arb_app_version())
            .prop_map(|(node, roles, app_version)| Message::Join { node, roles, app_version }),
        (arb_node(), arb_gossip())
            .prop_map(|(from, gossip)| Message::Welcome { from, gossip: Arc::new(gossip) }),
        (arb_node(), arb_node(), arb_gossip()).prop_map(|(from, to, gossip)| Message::Gossip {
            from,
            to,
            gossip: Arc::new(gossip)
        }),
        (arb_node(), arb_clock(), prop::collection::vec(any::<u8>(), 0..24)).prop_map(
            |(from, version, seen_digest)| Message::GossipStatus { from, version, seen_digest }
        ),
        (arb_node(), any::<u64>())
            .prop_map(|(from, sequence_nr)| Message::Heartbeat { from, sequence_nr }),
        (arb_node(), any::<u64>())
            .prop_map(|(from, sequence_nr)| Message::HeartbeatRsp { from, sequence_nr }),
        arb_node().prop_map(|node| Message::ExitingConfirmed { node }),
    ]
}

/// Member equality is identity only, so gossips are also compared member by member in full.
fn same_gossip(a: &Gossip, b: &Gossip) -> bool {
    a == b && a.members().zip(b.members()).all(|(x, y)| x.same_state(y))
}

fn same_message(a: &Message, b: &Message) -> bool {
    match (a, b) {
        (Message::Welcome { gossip: x, .. }, Message::Welcome { gossip: y, .. })
        | (Message::Gossip { gossip: x, .. }, Message::Gossip { gossip: y, .. }) => {
            a == b && same_gossip(x, y)
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------------------------
// Mutations of valid encodings.

#[derive(Clone, Debug)]
enum Mutation {
    Flip(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Extend(Vec<u8>),
    Splice(prop::sample::Index, Vec<u8>),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    let bytes = prop::collection::vec(any::<u8>(), 1..16);
    prop_oneof![
        (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        bytes.clone().prop_map(Mutation::Extend),
        (any::<prop::sample::Index>(), bytes).prop_map(|(i, b)| Mutation::Splice(i, b)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        match m {
            Mutation::Flip(i, mask) if !bytes.is_empty() => {
                let i = i.index(bytes.len());
                bytes[i] ^= mask;
            }
            Mutation::Truncate(i) if !bytes.is_empty() => bytes.truncate(i.index(bytes.len())),
            Mutation::Extend(more) => bytes.extend_from_slice(more),
            Mutation::Splice(i, more) if !bytes.is_empty() => {
                let i = i.index(bytes.len());
                bytes.splice(i..i, more.iter().copied());
            }
            _ => {}
        }
    }
    bytes
}

/// Raw payloads whose values are mostly valid (small indices into small tables, known statuses,
/// good addresses), so that many reach the duplicate and invariant checks, and some decode.
fn arb_raw_payload() -> impl Strategy<Value = pb::GossipPayload> {
    let idx = || prop_oneof![19 => 0u32..3, 1 => 0u32..8];
    let system = prop_oneof![8 => Just("s"), 1 => Just("bad system"), 1 => Just("")];
    let node = (
        prop_oneof![29 => Just(0u32), 1 => 0u32..3],
        prop_oneof![29 => "h[0-3]", 1 => Just(String::new())],
        prop_oneof![29 => 0u32..3, 1 => Just(70_000u32)],
        prop_oneof![29 => 1u64..3, 1 => Just(0u64)],
    )
        .prop_map(|(system, host, port, uid)| pb::Node { system, host, port, uid });
    let status = || prop_oneof![9 => 0i32..9, 1 => -1i32..12];
    let member = (idx(), 0u32..3, status(), prop::collection::vec(idx(), 0..3), idx()).prop_map(
        |(node, up_number, status, roles, app_version)| pb::Member {
            node,
            up_number,
            status,
            roles,
            app_version,
        },
    );
    let record = (idx(), prop_oneof![9 => 0i32..3, 1 => -1i32..5], 0u64..3)
        .prop_map(|(subject, status, version)| pb::SubjectRecord { subject, status, version });
    let row = (idx(), 0u64..3, prop::collection::vec(record, 0..3)).prop_map(
        |(observer, version, records)| pb::ObserverReachability { observer, version, records },
    );
    let entry = (idx(), 0u64..3).prop_map(|(node, counter)| pb::VersionEntry { node, counter });
    let tomb = (idx(), 0u64..3)
        .prop_map(|(node, removed_at_millis)| pb::Tombstone { node, removed_at_millis });
    (
        // The first system name is valid; others may not be.
        prop::collection::vec(system.prop_map(str::to_owned), 0..2).prop_map(|mut rest| {
            rest.insert(0, "s".to_owned());
            rest
        }),
        prop::collection::vec(node, 3..6),
        prop::collection::vec("r[0-2]", 1..3),
        prop::collection::vec("[0-9]\\.0", 1..3),
        prop::collection::vec(member, 0..4),
        prop::collection::vec(idx(), 0..3),
        prop::collection::vec(row, 0..2),
        prop::collection::vec(entry, 0..3),
        prop::collection::vec(tomb, 0..2),
    )
        .prop_map(
            |(
                all_systems,
                all_addresses,
                all_roles,
                all_app_versions,
                members,
                seen,
                reachability,
                version,
                tombstones,
            )| pb::GossipPayload {
                all_systems,
                all_addresses,
                all_roles,
                all_app_versions,
                members,
                seen,
                reachability,
                version,
                tombstones,
            },
        )
}

proptest! {
    #[test]
    fn every_message_round_trips(msg in arb_message()) {
        let bytes = encode(&msg);
        let back = decode(&bytes).unwrap();
        prop_assert!(same_message(&msg, &back), "{msg:?}\n!=\n{back:?}");
        prop_assert_eq!(encoded_len(&msg), bytes.len(), "encoded_len is the frame's length");
        prop_assert_eq!(encode(&back), bytes, "encoding is deterministic");
    }

    #[test]
    fn the_gossip_encoder_encodes_every_version_as_encode_does(
        gossips in prop::collection::vec(arb_gossip(), 1..8),
        from in arb_node(),
        to in arb_node(),
    ) {
        // Each version is sent twice (the second from the cache), and dropped before the next
        // is made, so a new version may be allocated where an old one was.
        let encoder = GossipEncoder::default();
        for g in gossips {
            let gossip = Arc::new(g);
            let msg = Message::Gossip { from: from.clone(), to: to.clone(), gossip };
            prop_assert_eq!(encoder.encode(&msg), encode(&msg));
            prop_assert_eq!(encoder.encode(&msg), encode(&msg));
            let welcome = Message::Welcome { from: from.clone(), gossip: match msg {
                Message::Gossip { gossip, .. } => gossip,
                _ => unreachable!(),
            } };
            prop_assert_eq!(encoder.encode(&welcome), encode(&welcome));
        }
    }

    #[test]
    fn every_message_round_trips_on_a_connection_that_names_its_sender(msg in arb_message()) {
        // The sender a message leaves out is the one the connection's handshake names.
        let sender = match &msg {
            Message::Heartbeat { from, .. }
            | Message::HeartbeatRsp { from, .. }
            | Message::GossipStatus { from, .. } => from.clone(),
            _ => UniqueAddress::new(Address::new("s", "h", 1).unwrap(), Uid::new(7).unwrap()),
        };
        let bytes = GossipEncoder::default().encode_on_connection(&msg);
        let back = decode_on_connection(&bytes, &DecodeLimits::DEFAULT, &sender).unwrap();
        prop_assert!(same_message(&msg, &back), "{msg:?}\n!=\n{back:?}");
        // A message that names its sender keeps that name on any connection.
        let named = decode_on_connection(&encode(&msg), &DecodeLimits::DEFAULT, &n("other", 9));
        prop_assert!(same_message(&msg, &named.unwrap()));
    }

    #[test]
    fn every_gossip_round_trips_through_the_compressed_payload(g in arb_gossip()) {
        let back = decode_gossip(&encode_gossip(&g)).unwrap();
        prop_assert!(same_gossip(&g, &back), "{g:?}\n!=\n{back:?}");
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
        let _ = decode_gossip(&bytes);
        let _ = decode_uncompressed(&bytes);
    }

    #[test]
    fn decoding_a_mutated_frame_never_panics(
        msg in arb_message(),
        mutations in prop::collection::vec(arb_mutation(), 1..4),
    ) {
        let _ = decode(&mutate(encode(&msg), &mutations));
    }

    #[test]
    fn decoding_a_mutated_gossip_payload_never_panics(
        g in arb_gossip(),
        mutations in prop::collection::vec(arb_mutation(), 1..4),
    ) {
        // Mutating before compression gets past the gzip checksum into the table decoder.
        let raw = mutate(to_pb(&g).encode_to_vec(), &mutations);
        let _ = decode_uncompressed(&raw);
        let _ = decode_gossip(&compress(&raw));
        let _ = decode_gossip(&mutate(encode_gossip(&g), &mutations));
    }

    #[test]
    fn a_decoded_payload_is_valid_or_rejected_never_a_panic(p in arb_raw_payload()) {
        if let Ok(g) = decode_uncompressed(&p.encode_to_vec()) {
            prop_assert!(g.check_invariants().is_ok());
            prop_assert!(same_gossip(&g, &decode_gossip(&encode_gossip(&g)).unwrap()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Specific rejections.

fn n(host: &str, uid: u64) -> UniqueAddress {
    UniqueAddress::new(Address::new("convoke", host, 25520).unwrap(), Uid::new(uid).unwrap())
}

fn pb_node(host: &str, uid: u64) -> pb::Node {
    pb::Node { system: 0, host: host.to_owned(), port: 25520, uid }
}

fn pb_member(node: u32, status: i32) -> pb::Member {
    pb::Member { node, up_number: 1, status, roles: vec![0], app_version: 0 }
}

/// A valid one-member payload, for tests to break in one place.
fn one_member_payload() -> pb::GossipPayload {
    pb::GossipPayload {
        all_systems: vec!["convoke".to_owned()],
        all_addresses: vec![pb_node("a", 1)],
        all_roles: vec!["dc-default".to_owned()],
        all_app_versions: vec!["1.0.0".to_owned()],
        members: vec![pb_member(0, MemberStatus::Up.wire_number())],
        seen: vec![0],
        ..Default::default()
    }
}

/// A change that breaks a valid payload in one place.
type Break = fn(&mut pb::GossipPayload);

fn decode_payload(p: &pb::GossipPayload) -> Result<Gossip, DecodeError> {
    decode_gossip(&compress(&p.encode_to_vec()))
}

fn frame(kind: pb::envelope::Kind) -> Vec<u8> {
    pb::Envelope { kind: Some(kind) }.encode_to_vec()
}

fn pb_unique(uid: u64) -> pb::UniqueAddress {
    pb::UniqueAddress {
        address: Some(pb::Address { system: "convoke".into(), host: "a".into(), port: 1 }),
        uid,
    }
}

#[test]
fn the_valid_one_member_payload_decodes() {
    let g = decode_payload(&one_member_payload()).unwrap();
    assert_eq!(g.len(), 1);
    assert!(g.seen_by(&n("a", 1)));
}

#[test]
fn an_index_past_the_end_of_its_table_is_rejected() {
    let cases: [(Break, &str); 7] = [
        (|p| p.members[0].node = 1, "all_addresses"),
        (|p| p.members[0].roles = vec![1], "all_roles"),
        (|p| p.members[0].app_version = 7, "all_app_versions"),
        (|p| p.seen = vec![u32::MAX], "all_addresses"),
        (|p| p.all_addresses[0].system = 1, "all_systems"),
        (|p| p.version = vec![pb::VersionEntry { node: 2, counter: 1 }], "all_addresses"),
        (|p| p.tombstones = vec![pb::Tombstone { node: 3, removed_at_millis: 1 }], "all_addresses"),
    ];
    for (breaks, expected_table) in cases {
        let mut p = one_member_payload();
        breaks(&mut p);
        match decode_payload(&p) {
            Err(DecodeError::IndexOutOfRange { table, .. }) => assert_eq!(table, expected_table),
            other => panic!("expected an index error for {expected_table}, got {other:?}"),
        }
    }
}

#[test]
fn a_zero_uid_is_rejected_in_a_frame_and_in_a_gossip() {
    let hb = pb::Heartbeat { from: Some(pb_unique(0)), sequence_nr: 1, creation_time_nanos: 0 };
    assert_eq!(decode(&frame(pb::envelope::Kind::Heartbeat(hb))), Err(DecodeError::ZeroUid));
    let mut p = one_member_payload();
    p.all_addresses[0].uid = 0;
    assert_eq!(decode_payload(&p).unwrap_err(), DecodeError::ZeroUid);
}

#[test]
fn an_unknown_status_number_is_rejected() {
    let mut p = one_member_payload();
    p.members[0].status = 42;
    assert_eq!(decode_payload(&p).unwrap_err(), DecodeError::UnknownMemberStatus(42));
    let mut p = one_member_payload();
    p.reachability = vec![pb::ObserverReachability {
        observer: 0,
        version: 1,
        records: vec![pb::SubjectRecord { subject: 0, status: 3, version: 1 }],
    }];
    assert_eq!(decode_payload(&p).unwrap_err(), DecodeError::UnknownReachabilityStatus(3));
}

#[test]
fn a_removed_member_or_a_tombstoned_member_is_an_invalid_gossip() {
    let mut p = one_member_payload();
    p.members[0].status = MemberStatus::Removed.wire_number();
    assert!(matches!(decode_payload(&p), Err(DecodeError::InvalidGossip(_))));
    let mut p = one_member_payload();
    p.tombstones = vec![pb::Tombstone { node: 0, removed_at_millis: 5 }];
    assert!(matches!(decode_payload(&p), Err(DecodeError::InvalidGossip(_))));
    let mut p = one_member_payload();
    p.all_addresses.push(pb_node("b", 2));
    p.seen.push(1);
    assert!(matches!(decode_payload(&p), Err(DecodeError::InvalidGossip(_))));
}

#[test]
fn duplicates_are_rejected() {
    let cases: [Break; 5] = [
        |p| p.all_addresses.push(pb_node("a", 1)),
        |p| p.members.push(pb_member(0, 1)),
        |p| p.seen.push(0),
        |p| p.members[0].roles = vec![0, 0],
        |p| p.version = vec![pb::VersionEntry { node: 0, counter: 1 }; 2],
    ];
    for breaks in cases {
        let mut p = one_member_payload();
        breaks(&mut p);
        assert!(matches!(decode_payload(&p), Err(DecodeError::Duplicate(_))), "{p:?}");
    }
}

/// Three members on hosts a, b, c, seen by all, each with a clock entry, every table in the
/// order `order` gives (encoders write node order; any other must decode the same).
fn three_member_payload(order: [u32; 3]) -> pb::GossipPayload {
    let up = MemberStatus::Up.wire_number();
    pb::GossipPayload {
        all_systems: vec!["convoke".to_owned()],
        all_addresses: vec![pb_node("a", 1), pb_node("b", 2), pb_node("c", 3)],
        all_roles: vec!["dc-default".to_owned()],
        all_app_versions: vec!["1.0.0".to_owned()],
        members: order.iter().map(|&i| pb_member(i, up)).collect(),
        seen: order.to_vec(),
        version: order.iter().map(|&node| pb::VersionEntry { node, counter: 1 }).collect(),
        ..Default::default()
    }
}

#[test]
fn tables_in_any_order_decode_alike_and_duplicates_apart_are_rejected() {
    let in_order = decode_payload(&three_member_payload([0, 1, 2])).unwrap();
    assert_eq!(in_order.members().count(), 3);
    for order in [[2, 1, 0], [1, 2, 0], [0, 2, 1]] {
        assert_eq!(decode_payload(&three_member_payload(order)).unwrap(), in_order, "{order:?}");
    }
    let cases: [Break; 4] = [
        |p| p.all_addresses = vec![pb_node("b", 2), pb_node("c", 3), pb_node("b", 2)],
        |p| p.members.push(pb_member(1, MemberStatus::Up.wire_number())),
        |p| p.seen.push(1),
        |p| p.version.push(pb::VersionEntry { node: 1, counter: 2 }),
    ];
    for breaks in cases {
        let mut p = three_member_payload([2, 1, 0]);
        breaks(&mut p);
        assert!(matches!(decode_payload(&p), Err(DecodeError::Duplicate(_))), "{p:?}");
    }
}

#[test]
fn addresses_on_one_host_share_its_string_and_a_bad_host_after_a_good_one_is_rejected() {
    let mut p = three_member_payload([0, 1, 2]);
    for (port, node) in p.all_addresses.iter_mut().enumerate() {
        node.host = "10.0.0.1".to_owned();
        node.port = 25520 + u32::try_from(port).unwrap();
    }
    let g = decode_payload(&p).unwrap();
    let hosts: Vec<*const u8> = g.members().map(|m| m.address().host().as_ptr()).collect();
    assert_eq!(hosts.len(), 3);
    assert!(hosts.iter().all(|h| *h == hosts[0]), "one string for the host");
    p.all_addresses[2].host = "10.0.0.1/x".to_owned();
    assert!(matches!(decode_payload(&p), Err(DecodeError::BadAddress(_))), "{p:?}");
}

#[test]
fn bad_addresses_are_rejected() {
    let mut p = one_member_payload();
    p.all_addresses[0].port = 65_536;
    assert_eq!(decode_payload(&p).unwrap_err(), DecodeError::PortOutOfRange(65_536));
    let mut p = one_member_payload();
    p.all_addresses[0].host = "a b".to_owned();
    assert!(matches!(decode_payload(&p), Err(DecodeError::BadAddress(_))));
    let nack = pb::InitJoinNack {
        address: Some(pb::Address { system: String::new(), host: "h".into(), port: 1 }),
    };
    assert!(matches!(
        decode(&frame(pb::envelope::Kind::InitJoinNack(nack))),
        Err(DecodeError::BadAddress(_))
    ));
}

#[test]
fn missing_fields_are_named() {
    assert_eq!(
        decode(&pb::Envelope::default().encode_to_vec()),
        Err(DecodeError::MissingField("Envelope.kind"))
    );
    assert_eq!(
        decode(&frame(pb::envelope::Kind::ExitingConfirmed(pb::ExitingConfirmed { node: None }))),
        Err(DecodeError::MissingField("ExitingConfirmed.node"))
    );
    let welcome = pb::Welcome { from: Some(pb_unique(1)), gossip: vec![] };
    assert_eq!(
        decode(&frame(pb::envelope::Kind::Welcome(welcome))),
        Err(DecodeError::MissingField("Welcome.gossip"))
    );
    let ack = pb::InitJoinAck { address: pb_unique(1).address, config_check: None };
    assert_eq!(
        decode(&frame(pb::envelope::Kind::InitJoinAck(ack))),
        Err(DecodeError::MissingField("InitJoinAck.config_check"))
    );
}

#[test]
fn on_a_connection_heartbeats_and_gossip_status_leave_their_sender_out() {
    let from = n("10.0.0.1", 42);
    let encoder = GossipEncoder::default();
    let hb = Message::Heartbeat { from: from.clone(), sequence_nr: 7 };
    let rsp = Message::HeartbeatRsp { from: from.clone(), sequence_nr: 7 };
    let status = Message::GossipStatus {
        from: from.clone(),
        version: VectorClock::new(),
        seen_digest: vec![],
    };
    for msg in [&hb, &rsp, &status] {
        let short = encoder.encode_on_connection(msg);
        let full = encode(msg);
        assert!(
            short.len() * 2 < full.len(),
            "{}: {} of {} bytes",
            msg.kind(),
            short.len(),
            full.len()
        );
        let other = n("10.0.0.2", 43);
        let back = decode_on_connection(&short, &DecodeLimits::DEFAULT, &other).unwrap();
        let (Message::Heartbeat { from: got, .. }
        | Message::HeartbeatRsp { from: got, .. }
        | Message::GossipStatus { from: got, .. }) = back
        else {
            panic!("{back:?}")
        };
        assert_eq!(got, other, "the sender is the connection's");
        // Without a connection to name it, the missing sender is an error naming the field.
        assert!(
            matches!(decode(&short), Err(DecodeError::MissingField(f)) if f.ends_with(".from"))
        );
    }
    // Every other message is encoded as `encode` does.
    let join = Message::ExitingConfirmed { node: from };
    assert_eq!(encoder.encode_on_connection(&join), encode(&join));
}

#[test]
fn a_frame_above_the_limit_is_rejected_before_decoding() {
    let msg = Message::ExitingConfirmed { node: n("a", 1) };
    let bytes = encode(&msg);
    let tight = DecodeLimits { max_frame_bytes: bytes.len(), ..DecodeLimits::DEFAULT };
    assert_eq!(decode_with_limits(&bytes, &tight), Ok(msg));
    let tighter = DecodeLimits { max_frame_bytes: bytes.len() - 1, ..tight };
    assert_eq!(
        decode_with_limits(&bytes, &tighter),
        Err(DecodeError::FrameTooLarge { len: bytes.len(), limit: bytes.len() - 1 })
    );
}

#[test]
fn a_gossip_exactly_at_the_decompressed_limit_is_accepted_and_one_byte_less_is_not() {
    let g = size_test_gossip(10);
    let (raw_len, _) = gossip_sizes(&g);
    let bytes = encode_gossip(&g);
    let at = DecodeLimits { max_decompressed_bytes: raw_len, ..DecodeLimits::DEFAULT };
    assert!(same_gossip(&decode_gossip_with_limits(&bytes, &at).unwrap(), &g));
    let below = DecodeLimits { max_decompressed_bytes: raw_len - 1, ..at };
    assert_eq!(
        decode_gossip_with_limits(&bytes, &below).unwrap_err(),
        DecodeError::DecompressedTooLarge { limit: raw_len - 1 }
    );
}

#[test]
fn a_gzip_bomb_is_rejected_at_the_decompressed_limit() {
    // 100 MiB of zeros compress to about 100 KiB: well inside the frame limit.
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..100 {
        encoder.write_all(&chunk).unwrap();
    }
    let bomb = encoder.finish().unwrap();
    assert!(bomb.len() < DecodeLimits::DEFAULT.max_frame_bytes);
    let welcome = pb::Welcome { from: Some(pb_unique(1)), gossip: bomb };
    assert_eq!(
        decode(&frame(pb::envelope::Kind::Welcome(welcome))),
        Err(DecodeError::DecompressedTooLarge {
            limit: DecodeLimits::DEFAULT.max_decompressed_bytes
        })
    );
}

#[test]
fn corrupt_gzip_is_a_decompress_error() {
    let mut bytes = encode_gossip(&size_test_gossip(3));
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff; // the length in the gzip trailer
    assert!(matches!(decode_gossip(&bytes), Err(DecodeError::Decompress(_))));
}

#[test]
fn protobuf_status_numbers_are_the_member_status_wire_numbers() {
    for s in MemberStatus::ALL {
        let pb_status = pb::MemberStatus::try_from(s.wire_number()).unwrap();
        let mut expected = String::from("MEMBER_STATUS_");
        for (i, c) in s.name().chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                expected.push('_');
            }
            expected.push(c.to_ascii_uppercase());
        }
        assert_eq!(pb_status.as_str_name(), expected);
    }
}

#[test]
fn the_system_name_is_stored_once_per_gossip() {
    let p = to_pb(&size_test_gossip(50));
    assert_eq!(p.all_systems, ["convoke"]);
    assert_eq!(p.all_addresses.len(), 50);
    assert_eq!(p.all_roles, ["dc-default"]);
    assert_eq!(p.all_app_versions, ["1.0.0"]);
}

// ---------------------------------------------------------------------------------------------
// Sizes.

/// `members` Up members on distinct hosts with random-looking uids, all in the seen set, and a
/// vector-clock entry for all but every tenth: a converged cluster after some churn.
fn size_test_gossip(members: usize) -> Gossip {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    let nodes: Vec<UniqueAddress> = (0..members)
        .map(|i| {
            let host = format!("10.0.{}.{}", i / 250, i % 250 + 1);
            let address = Address::new("convoke", host, 25520).unwrap();
            UniqueAddress::new(address, Uid::new(rng.random::<u64>().max(1)).unwrap())
        })
        .collect();
    let roles = BTreeSet::from(["dc-default".to_owned()]);
    let version = AppVersion::parse("1.0.0");
    let ms = nodes.iter().enumerate().map(|(i, n)| {
        let up = UpNumber(u32::try_from(i).unwrap() + 1);
        Member::from_parts(n.clone(), up, MemberStatus::Up, roles.clone(), version.clone())
    });
    let clock = VectorClock::from_entries(
        nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| members < 10 || i % 10 != 9)
            .map(|(_, n)| (n.clone(), rng.random_range(1..200u64))),
    );
    let seen = nodes.iter().cloned().collect();
    let g = Gossip::from_parts(ms, seen, Reachability::new(), clock, BTreeMap::new());
    g.check_invariants().unwrap();
    g
}

#[test]
fn gossip_size_of_1000_up_members_stays_under_64_kib() {
    for members in [10, 100, 1000] {
        let g = size_test_gossip(members);
        let (raw, compressed) = gossip_sizes(&g);
        println!(
            "gossip size, {members:>4} Up members: {raw:>6} bytes uncompressed, \
             {compressed:>6} bytes compressed"
        );
        let bytes = encode_gossip(&g);
        assert_eq!(bytes.len(), compressed);
        assert!(same_gossip(&decode_gossip(&bytes).unwrap(), &g));
        if members == 1000 {
            assert!(compressed < 64 * 1024, "{compressed} bytes");
        }
    }
}

#[test]
fn decoded_members_share_their_system_role_set_and_version_but_not_different_ones() {
    let roles = |rs: &[&str]| rs.iter().map(|r| (*r).to_owned()).collect::<BTreeSet<String>>();
    let members = [
        Member::joining(n("a", 1), roles(&["dc-default", "web"]), AppVersion::parse("1.0")),
        Member::joining(n("b", 2), roles(&["dc-default", "web"]), AppVersion::parse("1.0")),
        Member::joining(n("c", 3), roles(&["dc-east"]), AppVersion::parse("2.0")),
    ];
    let g = Gossip::from_parts(
        members,
        BTreeSet::new(),
        Reachability::default(),
        VectorClock::new(),
        BTreeMap::new(),
    );
    let back = decode_gossip(&encode_gossip(&g)).unwrap();
    assert!(same_gossip(&g, &back));
    let [a, b, c] = [1, 2, 3].map(|i| back.members().find(|m| m.node().uid.get() == i).unwrap());
    assert!(std::ptr::eq(a.roles(), b.roles()), "one role set for the same roles");
    assert!(std::ptr::eq(a.app_version(), b.app_version()), "one version for the same version");
    assert!(std::ptr::eq(a.data_center(), b.data_center()));
    let system = |m: &Member| m.node().address.system().as_ptr();
    assert!(system(a) == system(b) && system(b) == system(c), "one string per system");
    assert!(!std::ptr::eq(a.roles(), c.roles()));
    assert!(!std::ptr::eq(a.app_version(), c.app_version()));
    assert_eq!((a.data_center(), c.data_center()), ("default", "east"));
}

#[test]
fn compress_gives_the_bytes_of_a_gzip_encoder_at_the_fastest_level_payload_after_payload() {
    // The deflate state is reused from payload to payload: nothing of one may leak into the next.
    let big = to_pb(&size_test_gossip(1000)).encode_to_vec();
    // Random bytes do not compress: the output outgrows the first guess at its size.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let noise = |len: usize, rng: &mut ChaCha8Rng| (0..len).map(|_| rng.random::<u8>()).collect();
    let random: Vec<u8> = noise(64 * 1024, &mut rng);
    let tiny: Vec<u8> = noise(3, &mut rng);
    let payloads = [big.clone(), Vec::new(), random, b"abc".repeat(5000), tiny, b"x".to_vec(), big];
    for raw in payloads {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        encoder.write_all(&raw).unwrap();
        assert_eq!(compress(&raw), encoder.finish().unwrap(), "{} bytes", raw.len());
    }
}

#[test]
fn heartbeats_carry_no_creation_time_and_those_of_earlier_releases_that_do_are_read() {
    let from = n("10.0.0.1", 42);
    let encoder = GossipEncoder::default();
    let hb = Message::Heartbeat { from: from.clone(), sequence_nr: 300 };
    // On a connection: the envelope's tag and length, then the sequence number's tag and two
    // bytes of varint.
    assert_eq!(encoder.encode_on_connection(&hb).len(), 5);
    // An earlier release set field 3 to its clock; the field is read past and ignored.
    for kind in [
        pb::envelope::Kind::Heartbeat(pb::Heartbeat {
            from: Some(pb_unique(42)),
            sequence_nr: 300,
            creation_time_nanos: 1 << 40,
        }),
        pb::envelope::Kind::HeartbeatRsp(pb::HeartbeatRsp {
            from: Some(pb_unique(42)),
            sequence_nr: 300,
            creation_time_nanos: 1 << 40,
        }),
    ] {
        let decoded = decode(&frame(kind)).unwrap();
        let (Message::Heartbeat { sequence_nr, .. } | Message::HeartbeatRsp { sequence_nr, .. }) =
            decoded
        else {
            panic!("not a heartbeat: {decoded:?}");
        };
        assert_eq!(sequence_nr, 300);
    }
}
