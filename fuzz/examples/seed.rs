//! Writes the committed seed corpus, `fuzz/corpus/<target>/`, from convoke's real encoders.
//!
//! ```sh
//! cargo +nightly run --manifest-path fuzz/Cargo.toml --example seed
//! ```
//!
//! Every seed is checked with the decoder its target fuzzes before it is written, so the corpus
//! holds valid inputs only; each file is named after what it holds, and a run replaces the files
//! it writes (files added by hand or by a fuzzer are left alone). The input layouts (a leading
//! mode byte, the frame target's header) are described in each target's file.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use convoke::management::{Form, find_member, seed_nodes};
use convoke::messaging::envelope::{Body, Envelope, Failure};
use convoke::settings::{Settings, Sources};
use convoke::sharding::wire::{self as sharding_wire, Decoded, WireFailure};
use convoke::transport::frame::FrameCodec;
use convoke::transport::handshake::{Handshake, MAX_HANDSHAKE_BYTES, StreamKind};
use convoke_bootstrap::probe::parse_seed_nodes;
use convoke_bootstrap::{SeedNode, SeedNodes};
use convoke_membership::gossip::{Gossip, WallMillis};
use convoke_membership::member::UpNumber;
use convoke_membership::message::ConfigCheck;
use convoke_membership::reachability::Reachability;
use convoke_membership::vclock::VectorClock;
use convoke_membership::version::AppVersion;
use convoke_membership::wire::{self, DecodeLimits};
use convoke_membership::{
    Address, CurrentClusterState, Member, MemberStatus, Message, Uid, UniqueAddress,
};
use convoke_sharding::{
    Ballot, CoordinatorMsg, CoordinatorState, RegionMsg, ReplicaMsg, ShardId, StateVersion,
};
use convoke_singleton::HandOver;
use tokio_util::codec::Encoder;

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut seeds = Seeds { corpus, written: 0 };
    wire_seeds(&mut seeds);
    handshake_seeds(&mut seeds);
    frame_seeds(&mut seeds);
    messaging_seeds(&mut seeds);
    management_seeds(&mut seeds);
    seed_nodes_seeds(&mut seeds);
    settings_seeds(&mut seeds);
    sharding_frame_seeds(&mut seeds);
    hand_over_seeds(&mut seeds);
    data_message_seeds(&mut seeds);
    println!("wrote {} seed files under {}", seeds.written, seeds.corpus.display());
}

struct Seeds {
    corpus: PathBuf,
    written: usize,
}

impl Seeds {
    fn write(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.corpus.join(target);
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        std::fs::write(dir.join(name), bytes).expect("write a seed");
        self.written += 1;
    }
}

fn with_mode(mode: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![mode];
    out.extend_from_slice(bytes);
    out
}

fn node(text: &str, uid: u64) -> UniqueAddress {
    UniqueAddress::new(text.parse().expect("a valid address"), Uid::new(uid).expect("non-zero"))
}

fn member(n: &UniqueAddress, up: u32, status: MemberStatus, roles: &[&str]) -> Member {
    let roles: BTreeSet<String> = roles.iter().map(|r| (*r).to_owned()).collect();
    Member::from_parts(n.clone(), UpNumber(up), status, roles, AppVersion::parse("1.2.3"))
}

/// Three members (one of them unreachable from another), a vector clock, seen and a tombstone.
fn three_member_gossip() -> Gossip {
    let a = node("convoke://convoke@10.0.0.1:25520", 1);
    let b = node("convoke://convoke@10.0.0.2:25520", 2);
    let c = node("convoke://convoke@[fe80::1]:25520", 3);
    let members = [
        member(&a, 1, MemberStatus::Up, &["dc-default", "frontend"]),
        member(&b, 2, MemberStatus::Up, &["dc-default", "backend"]),
        member(&c, 0, MemberStatus::Joining, &["dc-default"]),
    ];
    let mut reachability = Reachability::new();
    reachability.unreachable(&a, &b);
    let version = VectorClock::from_entries([(a.clone(), 3), (b.clone(), 1)]);
    let seen = BTreeSet::from([a.clone(), b]);
    let tombstones =
        BTreeMap::from([(node("convoke://convoke@10.0.0.9:25520", 9), WallMillis(1_700_000_000))]);
    let g = Gossip::from_parts(members, seen, reachability, version, tombstones);
    g.check_invariants().expect("a valid gossip");
    g
}

fn one_member_gossip() -> Gossip {
    let a = node("convoke://orders@127.0.0.1:25520", 7);
    Gossip::with_members([member(&a, 1, MemberStatus::Up, &["dc-default"])])
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut raw).expect("valid gzip");
    raw
}

fn wire_seeds(seeds: &mut Seeds) {
    let limits = DecodeLimits { max_frame_bytes: 64 << 10, max_decompressed_bytes: 1 << 20 };
    let a = node("convoke://convoke@10.0.0.1:25520", 1);
    let b = node("convoke://convoke@10.0.0.2:25520", 2);
    let config = BTreeMap::from([
        ("cluster.downing-provider-class".to_owned(), "keep-majority".to_owned()),
        ("cluster.app-version".to_owned(), "1.2.3".to_owned()),
    ]);
    let messages = [
        ("init-join", Message::InitJoin { config: config.clone() }),
        (
            "init-join-ack-compatible",
            Message::InitJoinAck {
                address: a.address.clone(),
                config_check: ConfigCheck::Compatible(config),
            },
        ),
        (
            "init-join-ack-incompatible",
            Message::InitJoinAck {
                address: a.address.clone(),
                config_check: ConfigCheck::Incompatible,
            },
        ),
        ("init-join-nack", Message::InitJoinNack { address: a.address.clone() }),
        (
            "join",
            Message::Join {
                node: b.clone(),
                roles: BTreeSet::from(["dc-default".to_owned(), "backend".to_owned()]),
                app_version: AppVersion::parse("1.2.3+4-abcd1234"),
            },
        ),
        ("welcome", Message::Welcome { from: a.clone(), gossip: one_member_gossip().into() }),
        (
            "gossip",
            Message::Gossip {
                from: a.clone(),
                to: b.clone(),
                gossip: three_member_gossip().into(),
            },
        ),
        (
            "gossip-status",
            Message::GossipStatus {
                from: a.clone(),
                version: VectorClock::from_entries([(a.clone(), 3), (b.clone(), 1)]),
                seen_digest: vec![0x5a; 20],
            },
        ),
        (
            "heartbeat",
            Message::Heartbeat { from: a.clone(), sequence_nr: 42 },
        ),
        (
            "heartbeat-rsp",
            Message::HeartbeatRsp { from: b.clone(), sequence_nr: 42 },
        ),
        ("exiting-confirmed", Message::ExitingConfirmed { node: b }),
    ];
    for (name, msg) in messages {
        let frame = wire::encode(&msg);
        assert_eq!(wire::decode_with_limits(&frame, &limits).as_ref(), Ok(&msg), "{name}");
        seeds.write("wire", &format!("frame-{name}"), &with_mode(0, &frame));
    }
    for (name, g) in [
        ("empty", Gossip::empty()),
        ("one-member", one_member_gossip()),
        ("three-members", three_member_gossip()),
    ] {
        let compressed = wire::encode_gossip(&g);
        assert!(wire::decode_gossip_with_limits(&compressed, &limits).is_ok(), "{name}");
        seeds.write("wire", &format!("gzip-gossip-{name}"), &with_mode(1, &compressed));
        seeds.write("wire", &format!("raw-gossip-{name}"), &with_mode(2, &gunzip(&compressed)));
    }
}

fn handshake_seeds(seeds: &mut Seeds) {
    for (name, address, stream) in [
        ("ordinary", "convoke://convoke@127.0.0.1:25520", StreamKind::Ordinary),
        ("control-ipv6", "convoke://orders@[::1]:25521", StreamKind::Control),
        (
            "application-hostname",
            "convoke://my_system@node-1.example.com:1",
            StreamKind::Application,
        ),
    ] {
        let hs = Handshake::new(node(address, u64::MAX - 1), stream);
        let bytes = hs.encode().expect("a short handshake");
        assert_eq!(Handshake::decode(&bytes).as_ref(), Ok(&hs), "{name}");
        seeds.write("handshake", name, &bytes);
    }
}

/// The frame target's limit byte for at least `bytes` (see `fuzz_targets/frame.rs`).
fn limit_byte(bytes: usize) -> u8 {
    if bytes < 128 { bytes as u8 } else { 128 + bytes.div_ceil(256).min(127) as u8 }
}

fn frame_seeds(seeds: &mut Seeds) {
    let handshake =
        Handshake::new(node("convoke://convoke@127.0.0.1:25520", 5), StreamKind::Ordinary)
            .encode()
            .expect("a short handshake");
    let heartbeat = wire::encode(&Message::Heartbeat {
        from: node("convoke://convoke@127.0.0.1:25520", 5),
        sequence_nr: 1,
    });
    let gossip = wire::encode(&Message::Welcome {
        from: node("convoke://convoke@127.0.0.1:25520", 5),
        gossip: one_member_gossip().into(),
    });
    let mut codec = FrameCodec::new(4 << 10);
    let mut stream = BytesMut::new();
    for payload in [&handshake[..], &heartbeat, b"", &gossip] {
        codec
            .encode(Bytes::copy_from_slice(payload), &mut stream)
            .expect("a frame within the limit");
    }
    let (first, later) = (limit_byte(MAX_HANDSHAKE_BYTES), limit_byte(4 << 10));
    for (name, chunks) in [
        ("one-chunk", &[][..]),
        ("byte-by-byte", &[0][..]),
        ("uneven-chunks", &[2, 0, 40, 255][..]),
    ] {
        let mut input = vec![first, later, chunks.len() as u8];
        input.extend_from_slice(chunks);
        input.extend_from_slice(&stream);
        seeds.write("frame", name, &input);
    }
    // A stream that ends inside its second frame.
    let mut input = vec![first, later, 0];
    input.extend_from_slice(&stream[..stream.len() - 3]);
    seeds.write("frame", "truncated", &input);
}

fn messaging_seeds(seeds: &mut Seeds) {
    let payload = Bytes::from_static(b"\x03\x01\x02\x03postcard");
    let bodies = [
        ("tell", Body::Tell { endpoint: "orders.created".into(), payload: payload.clone() }),
        ("ask", Body::Ask { id: 7, endpoint: "orders.get".into(), payload: payload.clone() }),
        ("ask-empty", Body::Ask { id: 8, endpoint: "e".into(), payload: Bytes::new() }),
        ("reply", Body::Reply { id: 7, payload }),
        (
            "failure-no-such-endpoint",
            Body::Failure { id: 9, failure: Failure::NoSuchEndpoint, detail: "orders.get".into() },
        ),
        (
            "failure-overloaded",
            Body::Failure { id: 10, failure: Failure::Overloaded, detail: String::new() },
        ),
    ];
    for (name, body) in bodies {
        let envelope = Envelope { to_uid: 0x0102_0304_0506_0708, body };
        let bytes = envelope.encode();
        assert_eq!(Envelope::decode(&bytes).as_ref(), Ok(&envelope), "{name}");
        seeds.write("messaging", name, &bytes);
    }
}

fn management_state() -> CurrentClusterState {
    let a = node("convoke://Main@hostname.com:3311", 1);
    let b = node("convoke://Main@[::1]:3311", 2);
    let c = node("convoke://convoke@127.0.0.1:25520", 4);
    CurrentClusterState {
        self_node: Some(a.clone()),
        members: vec![
            member(&a, 1, MemberStatus::Up, &["dc-default"]),
            member(&b, 2, MemberStatus::Up, &["dc-default"]),
            member(&c, 3, MemberStatus::Joining, &["dc-default"]),
        ],
        ..CurrentClusterState::default()
    }
}

fn form(content_type: Option<&str>, body: &[u8]) -> Result<Form, convoke::management::ApiError> {
    let mut request = axum::http::Request::builder().method("PUT").uri("/cluster");
    if let Some(ct) = content_type {
        request = request.header(axum::http::header::CONTENT_TYPE, ct);
    }
    let request = request.body(axum::body::Body::from(body.to_vec())).expect("a request");
    futures::executor::block_on(<Form as axum::extract::FromRequest<()>>::from_request(
        request,
        &(),
    ))
}

fn management_seeds(seeds: &mut Seeds) {
    let state = management_state();
    for (i, m) in state.members.iter().enumerate() {
        let full = m.address().to_string();
        let short = full.strip_prefix("convoke://").expect("the scheme").to_owned();
        for (kind, given) in [("full", full.clone()), ("short", short)] {
            assert!(find_member(&state, &given).is_some(), "{given}");
            assert!(given.parse::<Address>().is_ok() || kind == "short", "{given}");
            seeds.write(
                "management_parse",
                &format!("address-{kind}-{i}"),
                &with_mode(0, given.as_bytes()),
            );
        }
    }
    let urlencoded = |pairs: &[(&str, &str)]| serde_urlencoded::to_string(pairs).expect("a form");
    let forms = [
        ("down", urlencoded(&[("operation", "down")])),
        ("leave", urlencoded(&[("operation", "Leave")])),
        ("shutdown", urlencoded(&[("operation", "prepare-for-full-shutdown")])),
        ("join", urlencoded(&[("address", "convoke://Main@[::1]:3311")])),
        (
            "repeated",
            urlencoded(&[("operation", "leave"), ("x", "a b&c=d"), ("operation", "down")]),
        ),
    ];
    let content_type = "application/x-www-form-urlencoded";
    for (name, body) in &forms {
        let parsed = form(Some(content_type), body.as_bytes()).expect("a form");
        assert!(parsed.field("operation").is_ok() || parsed.field("address").is_ok(), "{name}");
        seeds.write(
            "management_parse",
            &format!("urlencoded-{name}"),
            &with_mode(1, body.as_bytes()),
        );
    }
    let (_, down) = &forms[0];
    assert!(form(None, down.as_bytes()).is_ok());
    seeds.write("management_parse", "no-content-type-down", &with_mode(2, down.as_bytes()));

    let multipart = |boundary: &str, fields: &[(&str, &str)]| {
        let mut body = String::new();
        for (name, value) in fields {
            body.push_str(&format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            ));
        }
        body.push_str(&format!("--{boundary}--\r\n"));
        body
    };
    let body = multipart("BOUNDARY", &[("operation", "down")]);
    let parsed =
        form(Some("multipart/form-data; boundary=BOUNDARY"), body.as_bytes()).expect("a form");
    assert_eq!(parsed.field("operation").ok(), Some("down"));
    seeds.write("management_parse", "multipart-down", &with_mode(3, body.as_bytes()));

    let ct = "multipart/form-data; boundary=------------------------d74496d66958873e";
    let body = multipart(
        "------------------------d74496d66958873e",
        &[("operation", "leave"), ("address", "convoke://Main@hostname.com:3311")],
    );
    assert!(form(Some(ct), body.as_bytes()).is_ok());
    seeds.write(
        "management_parse",
        "content-type-multipart",
        &with_mode(4, format!("{ct}\n{body}").as_bytes()),
    );
    let ct = "application/x-www-form-urlencoded; charset=utf-8";
    assert!(form(Some(ct), down.as_bytes()).is_ok());
    seeds.write(
        "management_parse",
        "content-type-urlencoded",
        &with_mode(4, format!("{ct}\n{down}").as_bytes()),
    );
}

fn seed_nodes_seeds(seeds: &mut Seeds) {
    let state = management_state();
    let in_cluster = seed_nodes(&state);
    assert!(!in_cluster.seed_nodes.is_empty());
    let no_cluster = seed_nodes(&CurrentClusterState {
        self_node: state.self_node.clone(),
        ..CurrentClusterState::default()
    });
    let pekko = SeedNodes {
        self_node: "pekko://System@127.0.0.1:7355".into(),
        seed_nodes: vec![SeedNode {
            node: "pekko://System@127.0.0.1:7355".into(),
            node_uid: -2_440_990_093_160_003_086,
            status: "Up".into(),
            roles: vec!["dc-default".into()],
        }],
    };
    for (name, answer) in [("in-cluster", in_cluster), ("no-cluster", no_cluster), ("pekko", pekko)]
    {
        let json = serde_json::to_vec(&answer).expect("seed nodes serialize");
        assert_eq!(parse_seed_nodes(&json).ok().as_ref(), Some(&answer), "{name}");
        seeds.write("seed_nodes", name, &json);
    }
}

/// The keys of `table` whose values differ from `defaults`, with the tables that hold them.
fn changed(table: &toml::Table, defaults: &toml::Table) -> toml::Table {
    let mut out = toml::Table::new();
    for (key, value) in table {
        match (value, defaults.get(key)) {
            (toml::Value::Table(t), Some(toml::Value::Table(d))) => {
                let inner = changed(t, d);
                if !inner.is_empty() {
                    out.insert(key.clone(), toml::Value::Table(inner));
                }
            }
            (v, Some(d)) if v == d => {}
            (v, _) => {
                out.insert(key.clone(), v.clone());
            }
        }
    }
    out
}

fn settings_seeds(seeds: &mut Seeds) {
    let dir = std::env::temp_dir().join(format!("convoke-fuzz-seed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let defaults = Settings::default();
    let mut seed_nodes = Settings::default();
    seed_nodes.cluster.port = 25521;
    seed_nodes.cluster.seed_nodes = vec!["convoke://convoke@127.0.0.1:25520".into()];
    seed_nodes.management.port = 8559;
    let mut read_only = Settings::default();
    read_only.management.read_only = true;
    read_only.management.base_path = "admin".into();
    read_only.bootstrap.required_contact_point_nr = 3;
    let mut all = Settings::default();
    all.cluster.core.roles = BTreeSet::from(["backend".to_owned()]);
    for (name, settings, minimal) in [
        ("defaults-printed", &defaults, false),
        ("seed-nodes", &seed_nodes, true),
        ("read-only-management", &read_only, true),
        ("roles", &all, true),
    ] {
        let table = settings.to_table();
        let text = if minimal {
            toml::to_string(&changed(&table, &defaults.to_table())).expect("a TOML table")
        } else {
            settings.to_toml()
        };
        let path = dir.join(name);
        std::fs::write(&path, &text).expect("write a settings file");
        let loaded = Settings::load(&Sources { file: Some(&path), env: false, sets: vec![] })
            .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        assert_eq!(&loaded, settings, "{name}");
        seeds.write("settings", &format!("{name}.toml"), text.as_bytes());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A frame of every kind a region, coordinator or replica sends, as `convoke::sharding::wire`
/// encodes it.
fn sharding_frame_seeds(seeds: &mut Seeds) {
    let a = node("convoke://convoke@10.0.0.1:25520", 1);
    let b = node("convoke://convoke@[fe80::1]:25520", 2);
    let shard = || ShardId::new("17");
    let ballot = Ballot { round: 3, node: a.clone(), instance: 2 };
    let version = StateVersion { ballot: ballot.clone(), seq: 5 };
    let state = std::sync::Arc::new(CoordinatorState::from_parts(
        [a.clone(), b.clone()],
        [(shard(), a.clone()), (ShardId::new("4"), b.clone())],
    ));
    let frames = [
        ("register", Decoded::ToCoordinator(CoordinatorMsg::Register { hosted: vec![shard()] })),
        ("get-shard-home", Decoded::ToCoordinator(CoordinatorMsg::GetShardHome(shard()))),
        ("region-stopped", Decoded::ToCoordinator(CoordinatorMsg::RegionStopped)),
        ("shard-home", Decoded::ToRegion(RegionMsg::ShardHome { shard: shard(), region: b.clone() })),
        ("shard-homes", Decoded::ToRegion(RegionMsg::ShardHomes(vec![(shard(), a.clone())]))),
        ("begin-hand-off", Decoded::ToRegion(RegionMsg::BeginHandOff(shard()))),
        ("register-again", Decoded::ToRegion(RegionMsg::RegisterAgain)),
        ("replica-read", Decoded::Replica(ReplicaMsg::Read { ballot: ballot.clone() })),
        (
            "replica-read-reply",
            Decoded::Replica(ReplicaMsg::ReadReply {
                ballot: ballot.clone(),
                accepted: Some((version.clone(), state.clone())),
            }),
        ),
        ("replica-write", Decoded::Replica(ReplicaMsg::Write { version: version.clone(), state })),
        ("replica-rejected", Decoded::Replica(ReplicaMsg::Rejected { promised: ballot })),
        (
            "entity-ask",
            Decoded::Entity {
                shard: shard(),
                entity: "counter-42".to_owned(),
                payload: vec![1, 42],
                reply_to: Some((a.clone(), 77)),
            },
        ),
        (
            "entity-tell",
            Decoded::Entity { shard: shard(), entity: "e".to_owned(), payload: vec![], reply_to: None },
        ),
        ("reply-ok", Decoded::Reply { id: 77, result: Ok(vec![0, 1, 2]) }),
        (
            "reply-failed",
            Decoded::Reply { id: 78, result: Err(WireFailure::EntityFailed("boom".to_owned())) },
        ),
    ];
    for (name, frame) in frames {
        let bytes = sharding_wire::encode(&frame);
        assert_eq!(sharding_wire::decode(&bytes).as_ref(), Ok(&frame), "{name}");
        seeds.write("sharding_frame", name, &bytes);
    }
}

/// Every singleton hand-over message, postcard-encoded as the messaging endpoint sends it.
fn data_message_seeds(seeds: &mut Seeds) {
    use convoke_data::message::{Message as DataMessage, Request as DataRequest, SpanDigest, decode, encode};
    use convoke_data::ring::Span;
    use convoke_data::version::{ActorId, VersionVector};
    use convoke_data::{Key, Level, Object, Value};
    let key = Key::new("users/42", 1024).expect("a valid key");
    let mut object = Object::default();
    object.write(ActorId(7), &VersionVector::new(), Value::Bytes(b"ada".to_vec()));
    object.write(ActorId(9), &VersionVector::new(), Value::Tombstone);
    let messages = [
        ("write", DataMessage::Write { req: 1, key: key.clone(), object: object.clone(), hint: None }),
        (
            "write-hinted",
            DataMessage::Write {
                req: 2,
                key: key.clone(),
                object: object.clone(),
                hint: Some("convoke://convoke@127.0.0.1:25522".into()),
            },
        ),
        ("read", DataMessage::Read { req: 3, key: key.clone() }),
        ("read-reply", DataMessage::ReadReply { req: 3, object: Some(object.clone()) }),
        ("repair", DataMessage::Repair { key: key.clone(), object: object.clone() }),
        ("digests", DataMessage::Digests { spans: vec![SpanDigest { span: Span::ALL, digest: 1, count: 2 }] }),
        ("keys", DataMessage::Keys { span: Span::ALL, keys: vec![(key.clone(), 5)] }),
        ("pull", DataMessage::Pull { keys: vec![key.clone()] }),
        ("handoff", DataMessage::Handoff { req: 4, entries: vec![(key.clone(), object.clone())] }),
        ("reap", DataMessage::Reap { key: key.clone(), digest: 9 }),
        ("forward", DataMessage::Forward { req: 5, request: DataRequest::Get { key, r: Level::Quorum } }),
        (
            "rings",
            DataMessage::Rings {
                absent: vec![("convoke://convoke@127.0.0.1:25522".into(), 1500)],
                past: vec![(
                    vec!["convoke://convoke@127.0.0.1:25521".into(), "convoke://convoke@127.0.0.1:25522".into()],
                    30_000,
                )],
                left: vec![("convoke://convoke@127.0.0.1:25523".into(), 4000)],
            },
        ),
    ];
    for (name, m) in messages {
        let bytes = encode(&m);
        assert_eq!(decode(&bytes).ok(), Some(m), "{name} decodes");
        seeds.write("data_message", name, &bytes);
    }
}

fn hand_over_seeds(seeds: &mut Seeds) {
    for m in [
        HandOver::HandOverToMe,
        HandOver::HandOverInProgress,
        HandOver::HandOverDone,
        HandOver::TakeOverFromMe,
        HandOver::Released,
    ] {
        let bytes = postcard::to_stdvec(&m).expect("encodes");
        assert_eq!(postcard::from_bytes::<HandOver>(&bytes), Ok(m));
        seeds.write("hand_over", m.name(), &bytes);
    }
}
