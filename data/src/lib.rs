//! convoke-data: the sans-IO machines of convoke's replicated store.
//!
//! The store keeps keys partitioned over the members: each key lives on N replicas picked by a
//! consistent-hash ring of the Up members with the store's role. Reads and writes go through a
//! coordinator that waits for R answers or W acknowledgements (`one`, `quorum`, `all` or a count);
//! versions are dotted version vectors, so concurrent writes are kept as siblings with a causal
//! context and never silently dropped; CRDT values merge by themselves. Replicas behind a read's
//! merge are repaired, and a write for an unreachable replica is held by a fallback and handed
//! over when it returns. No tokio, no sockets, no clock reads, no disk: time comes in as
//! `Instant`s, storage is a [`Storage`] the driver supplies, outputs go out as data.
//! `clippy.toml` bans clocks, sleeps, threads, files and hash maps. `docs/data.md` tells the
//! design.
//!
//! Layout:
//! - `version.rs`: actors, dots, version vectors and the versions of a key (a DVV set);
//! - `crdt/`: the CRDT values (counters, flag, register, set, map);
//! - `fenced.rs`: fenced values, written by one writer at a time;
//! - `object.rs`: keys, values (bytes, CRDT, tombstone), what a read returns, refusals;
//! - `ring.rs`: the consistent-hash ring and preference lists;
//! - `config.rs`: settings and consistency levels;
//! - `message.rs`: requests, replies, errors and the messages between stores;
//! - `storage.rs`: the storage interface, and an in-memory storage;
//! - `store.rs`: the machine, replica and coordinator in one.
//!
//! # Example
//!
//! Two nodes, each with its store; a write on one is read on the other. A driver delivers the
//! messages, syncs each store before draining it (a replica acknowledges only what is
//! durable), and hands replies back to the caller.
//!
//! ```
//! use std::collections::BTreeSet;
//! use std::time::Instant;
//!
//! use convoke_data::version::VersionVector;
//! use convoke_data::{
//!     DataConfig, Key, Level, MemoryStorage, Output, Read, Reply, Request, Store, Value,
//! };
//! use convoke_membership::member::UpNumber;
//! use convoke_membership::version::AppVersion;
//! use convoke_membership::{Address, Member, MemberStatus, Uid, UniqueAddress};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let node = |port: u16| -> Result<UniqueAddress, Box<dyn std::error::Error>> {
//!     let uid = Uid::new(u64::from(port)).ok_or("a uid is not zero")?;
//!     Ok(UniqueAddress::new(Address::new("convoke", "127.0.0.1", port)?, uid))
//! };
//! let nodes = [node(25520)?, node(25521)?];
//! let members: Vec<Member> = nodes
//!     .iter()
//!     .zip(1..)
//!     .map(|(n, up)| {
//!         Member::from_parts(n.clone(), UpNumber(up), MemberStatus::Up, BTreeSet::new(), AppVersion::default())
//!     })
//!     .collect();
//!
//! let now = Instant::now();
//! let config = DataConfig { replicas: 2, ..DataConfig::default() };
//! let mut stores = Vec::new();
//! for n in &nodes {
//!     let mut s = Store::new(config.clone(), n.clone(), MemoryStorage::new(), now)?;
//!     s.handle_members(&members, &BTreeSet::new(), now);
//!     stores.push(s);
//! }
//!
//! // Carries every message until none is left; returns the replies, by store.
//! let run = |stores: &mut Vec<Store<MemoryStorage>>| {
//!     let mut replies = Vec::new();
//!     loop {
//!         let mut mail = Vec::new();
//!         for (i, s) in stores.iter_mut().enumerate() {
//!             if s.needs_sync() {
//!                 s.sync(now);
//!             }
//!             while let Some(out) = s.poll_output() {
//!                 match out {
//!                     Output::Send { to, message } => mail.push((nodes[i].clone(), to, message)),
//!                     Output::Reply { result, .. } => replies.push((i, result)),
//!                     Output::Changed(_) => {}
//!                 }
//!             }
//!         }
//!         if mail.is_empty() {
//!             return replies;
//!         }
//!         for (from, to, message) in mail {
//!             let at = nodes.iter().position(|n| *n == to).unwrap_or_default();
//!             stores[at].handle_message(&from, message, now);
//!         }
//!     }
//! };
//!
//! let key = Key::new("greeting", config.max_key_bytes)?;
//! let value = Value::Bytes(b"hello".to_vec());
//! let put = Request::Put { key: key.clone(), value, context: VersionVector::new(), w: Level::All };
//! stores[0].request(put, now);
//! let replies = run(&mut stores);
//! assert!(matches!(replies.as_slice(), [(0, Ok(Reply::Written(_)))]));
//!
//! stores[1].request(Request::Get { key, r: Level::One }, now);
//! let replies = run(&mut stores);
//! let [(1, Ok(Reply::Read(Read { values, .. })))] = replies.as_slice() else {
//!     return Err("one read".into());
//! };
//! assert_eq!(values, &[Value::Bytes(b"hello".to_vec())]);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod config;
pub mod crdt;
pub mod fenced;
pub mod message;
pub mod object;
pub mod ring;
pub mod storage;
pub mod store;
pub mod version;

pub use config::{DataConfig, Level};
pub use message::{DataError, Message, Reply, Request};
pub use object::{Key, Object, Read, Refused, Value};
pub use storage::{MemoryStorage, Storage};
pub use store::{Output, RequestId, Store};
