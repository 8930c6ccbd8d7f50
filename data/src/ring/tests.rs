use std::collections::BTreeMap;

use super::*;

fn addr(port: u16) -> Address {
    Address::new("convoke", "127.0.0.1", port).expect("a valid address")
}

fn ring(ports: impl IntoIterator<Item = u16>) -> Ring {
    Ring::new(ports.into_iter().map(addr), 64)
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

#[test]
fn the_hash_is_fixed_because_it_decides_where_data_lives() {
    // Pinned: a change here moves every key of every deployed store.
    assert_eq!(hash(b""), 0xefd0_1f60_ba99_2926);
    assert_eq!(hash(b"convoke"), 0x14e0_8ab1_d7b2_cd99);
    assert_ne!(hash(b"key-1"), hash(b"key-2"));
}

#[test]
fn every_node_computes_the_same_ring_from_the_same_members_in_any_order() {
    assert_eq!(ring([1, 2, 3]), ring([3, 1, 2]));
    assert_eq!(ring([1, 2, 2, 3]), ring([1, 2, 3]), "a member is on the ring once");
}

#[test]
fn a_preference_list_names_every_member_once_and_the_first_n_are_the_replicas() {
    let r = ring(1..=5);
    for i in 0..200 {
        let list: Vec<&Address> = r.preference_list(&key(i)).collect();
        assert_eq!(list.len(), 5);
        let distinct: std::collections::BTreeSet<_> = list.iter().collect();
        assert_eq!(distinct.len(), 5);
        assert_eq!(r.replicas(&key(i), 3), list[..3]);
    }
    assert_eq!(ring(1..=2).replicas(&key(0), 3).len(), 2, "fewer members than replicas");
    assert!(Ring::default().replicas(&key(0), 3).is_empty());
}

#[test]
fn keys_spread_evenly_over_the_members() {
    let r = ring(1..=5);
    let mut primaries: BTreeMap<&Address, u32> = BTreeMap::new();
    for i in 0..10_000 {
        let first = r.replicas(&key(i), 1)[0];
        *primaries.entry(first).or_default() += 1;
    }
    // 64 tokens per member: each holds 2,000 of 10,000 keys give or take a third.
    for (m, n) in &primaries {
        assert!((1_333..=2_667).contains(n), "{m} is first for {n} of 10000 keys");
    }
}

#[test]
fn a_new_member_takes_keys_only_for_itself_and_moves_about_its_share() {
    let before = ring(1..=10);
    let after = ring(1..=11);
    let new = addr(11);
    let mut moved = 0;
    for i in 0..10_000 {
        let (old, now) = (before.replicas(&key(i), 3), after.replicas(&key(i), 3));
        // Every replica that is not the newcomer kept the key.
        for m in now.iter().filter(|m| ***m != new) {
            assert!(old.contains(m), "key {i} moved to {m}, which is not the new member");
        }
        moved += usize::from(now.contains(&&new));
    }
    // The newcomer holds about 3/11 of the keys (27%).
    assert!((2_000..3_500).contains(&moved), "{moved} of 10000 keys moved");
}

#[test]
fn the_arcs_cover_every_hash_once_and_share_a_preference_list_each() {
    let r = ring(1..=4);
    let arcs = r.arcs();
    assert_eq!(arcs.len(), 4 * 64);
    let mut spans: Vec<Span> = arcs.iter().flat_map(|a| a.spans()).collect();
    spans.sort_unstable();
    assert_eq!(spans[0].from, 0);
    assert_eq!(spans.last().map(|s| s.to), Some(u64::MAX));
    for pair in spans.windows(2) {
        assert_eq!(pair[0].to + 1, pair[1].from, "no gap, no overlap");
    }
    for i in 0..2_000 {
        let h = hash(&key(i));
        let arc = arcs.iter().find(|a| a.contains(h)).expect("an arc holds every hash");
        let at_end: Vec<&Address> = r.preference_list_at(arc.end).collect();
        let of_key: Vec<&Address> = r.preference_list(&key(i)).collect();
        assert_eq!(of_key, at_end);
    }
    let one = Ring::new([addr(1)], 1);
    assert_eq!(one.arcs().len(), 1);
    let whole: Vec<Span> = one.arcs()[0].spans().collect();
    assert_eq!(whole.iter().map(|s| u128::from(s.to - s.from) + 1).sum::<u128>(), 1u128 << 64);
}

#[test]
fn a_span_splits_into_parts_that_cover_it_exactly() {
    for span in [Span::ALL, Span { from: 10, to: 25 }, Span { from: 7, to: 7 }] {
        let parts = span.split(16);
        assert_eq!(parts.first().map(|s| s.from), Some(span.from));
        assert_eq!(parts.last().map(|s| s.to), Some(span.to));
        for pair in parts.windows(2) {
            assert_eq!(pair[0].to + 1, pair[1].from);
        }
    }
    assert_eq!(Span { from: 7, to: 7 }.split(16).len(), 1);
}

#[test]
fn members_preparing_for_a_full_shutdown_stay_on_the_ring_and_leaving_ones_do_not() {
    use convoke_membership::member::UpNumber;
    use convoke_membership::version::AppVersion;
    use convoke_membership::{Uid, UniqueAddress};
    let member = |port: u16, status| {
        let node = UniqueAddress::new(addr(port), Uid::new(u64::from(port)).expect("not zero"));
        Member::from_parts(node, UpNumber(1), status, Default::default(), AppVersion::default())
    };
    let members = [
        member(1, MemberStatus::Up),
        member(2, MemberStatus::PreparingForShutdown),
        member(3, MemberStatus::ReadyForShutdown),
        member(4, MemberStatus::Leaving),
        member(5, MemberStatus::Joining),
        member(6, MemberStatus::WeaklyUp),
    ];
    let ring = Ring::of_members(&members, None, 8);
    assert_eq!(ring.members(), [addr(1), addr(2), addr(3)]);
}

#[test]
fn a_span_that_ends_before_it_starts_is_invalid_and_splits_into_nothing() {
    let bad = Span { from: 10, to: 3 };
    assert!(!bad.is_valid());
    assert!(bad.split(16).is_empty());
    assert!(Span::ALL.is_valid());
}
