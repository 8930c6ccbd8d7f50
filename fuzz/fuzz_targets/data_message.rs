//! A replicated store message (`convoke_data::Message`) as a peer's store sends it on the
//! messaging endpoint `convoke.data`: decoded with `convoke_data::message::decode`, then handed
//! to a store of a three-member cluster (its replica holding one key), as the runtime does.
//!
//! Properties: decoding never panics; a decoded message encodes to bytes that decode back to an
//! equal message; the store takes in any decoded message, whatever its versions, keys or spans
//! claim, without panicking, and syncs.

#![no_main]

use std::collections::BTreeSet;
use std::time::Instant;

use convoke_data::message::{decode, encode};
use convoke_data::version::VersionVector;
use convoke_data::{DataConfig, Key, Level, MemoryStorage, Request, Store, Value};
use convoke_membership::member::UpNumber;
use convoke_membership::version::AppVersion;
use convoke_membership::{Address, Member, MemberStatus, Uid, UniqueAddress};
use libfuzzer_sys::fuzz_target;

fn node(port: u16) -> UniqueAddress {
    let address = Address::new("convoke", "127.0.0.1", port).expect("a valid address");
    UniqueAddress::new(address, Uid::new(u64::from(port)).expect("not zero"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(m) = decode(data) else { return };
    assert_eq!(decode(&encode(&m)).ok().as_ref(), Some(&m), "a decoded message round-trips");

    let now = Instant::now();
    let nodes = [node(25520), node(25521), node(25522)];
    let members: Vec<Member> = nodes
        .iter()
        .zip(1..)
        .map(|(n, up)| {
            Member::from_parts(n.clone(), UpNumber(up), MemberStatus::Up, BTreeSet::new(), AppVersion::default())
        })
        .collect();
    let mut store = Store::new(DataConfig::default(), nodes[0].clone(), MemoryStorage::new(), now)
        .unwrap_or_else(|e| match e {});
    store.handle_members(&members, &BTreeSet::new(), now);
    let key = Key::new("k", 1024).expect("a valid key");
    let put = Request::Put {
        key,
        value: Value::Bytes(b"v".to_vec()),
        context: VersionVector::new(),
        w: Level::One,
    };
    store.request(put, now);
    store.sync(now);
    while store.poll_output().is_some() {}
    store.handle_message(&nodes[1], m, now);
    store.sync(now);
    while store.poll_output().is_some() {}
    store.handle_timeout(now + std::time::Duration::from_secs(60));
});
