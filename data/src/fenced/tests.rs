use proptest::prelude::*;

use super::*;

fn b(round: u64, holder: u64) -> Ballot {
    Ballot { round, holder }
}

fn write(ballot: Ballot, seq: u64, bytes: &[u8]) -> FenceOp {
    FenceOp::Write { ballot, seq, bytes: bytes.to_vec() }
}

#[test]
fn a_claim_must_be_above_the_promise_and_a_write_at_least_the_promise() {
    let mut f = Fenced::default();
    f.apply(FenceOp::Claim(b(1, 7))).expect("the first claim");
    f.apply(write(b(1, 7), 1, b"one")).expect("the claimant writes");
    // The same ballot cannot claim again, nor a lower one.
    let refused = f.apply(FenceOp::Claim(b(1, 7))).expect_err("not above the promise");
    assert_eq!((refused.promise, refused.ballot), (b(1, 7), b(1, 7)));
    assert!(f.apply(FenceOp::Claim(b(1, 3))).is_err());
    // A newer writer claims; the older one's next write is refused and changes nothing.
    f.apply(FenceOp::Claim(b(2, 3))).expect("a newer claim");
    let before = f.clone();
    let refused = f.apply(write(b(1, 7), 2, b"two")).expect_err("fenced");
    assert!(refused.to_string().contains("promised ballot 2.3"), "{refused}");
    assert_eq!(f, before);
    // A writer's write that does not come after its previous one is refused too.
    f.apply(write(b(2, 3), 1, b"new")).expect("the new writer writes");
    assert!(f.apply(write(b(2, 3), 1, b"again")).is_err());
    assert_eq!(f.state.as_ref().map(|s| s.bytes.as_slice()), Some(&b"new"[..]));
}

#[test]
fn a_replica_refuses_a_value_made_under_a_ballot_below_its_promise() {
    let mut replica = Fenced::default();
    replica.apply(FenceOp::Claim(b(2, 1))).expect("claimed");
    let mut old = Fenced::default();
    old.apply(write(b(1, 9), 4, b"late")).expect("the old writer's own copy");
    assert!(replica.refuses(&old).is_some());
    let mut new = Fenced::default();
    new.apply(write(b(2, 1), 1, b"fresh")).expect("the claimant's copy");
    assert!(replica.refuses(&new).is_none());
}

#[test]
fn a_state_taken_in_by_some_replicas_only_is_superseded_by_the_next_writer() {
    // The old writer's write reached one replica; the new writer's state wins wherever they
    // meet, whatever the order.
    let mut stray = Fenced::default();
    stray.apply(write(b(1, 9), 6, b"stray")).expect("written");
    let mut newer = Fenced::default();
    newer.apply(FenceOp::Claim(b(2, 1))).expect("claimed");
    newer.apply(write(b(2, 1), 1, b"newer")).expect("written");
    let mut a = stray.clone();
    a.merge(&newer);
    let mut c = newer.clone();
    c.merge(&stray);
    assert_eq!(a, c);
    assert_eq!(a.state.map(|s| s.bytes), Some(b"newer".to_vec()));
}

fn ballot() -> impl Strategy<Value = Ballot> {
    (0..4u64, 0..3u64).prop_map(|(round, holder)| Ballot { round, holder })
}

#[test]
fn a_writer_claims_above_each_refusal_numbers_its_writes_and_stops_once_fenced() {
    let mut key = Fenced::default();
    let mut old = Writer::new(7);
    assert_eq!(old.write(b"early".to_vec()), None, "no write before the claim");
    key.apply(old.claim()).expect("the first claim");
    assert_eq!(old.claimed(key.state.as_ref()), Some(b(1, 7)));
    for (seq, bytes) in [(1, b"one"), (2, b"two")] {
        let op = old.write(bytes.to_vec()).expect("claimed");
        assert_eq!(op, write(b(1, 7), seq, bytes));
        key.apply(op).expect("the only writer");
    }

    // A second writer's first claim is refused; it claims above the promise the refusal names.
    let mut new = Writer::new(3);
    let refusal = key.apply(new.claim()).expect_err("not above 1.7");
    let again = new.claim_refused(&refusal).expect("a second try");
    assert_eq!(again, FenceOp::Claim(b(2, 3)));
    key.apply(again).expect("above the promise");
    assert_eq!(new.claimed(key.state.as_ref()), Some(b(2, 3)));
    assert_eq!(key.state.as_ref().map(|w| w.bytes.as_slice()), Some(&b"two"[..]));

    // The new writer writes; the old writer's next write is refused. It claims again, finds
    // the new writer's state, and is fenced: it makes no more operations.
    key.apply(new.write(b"new".to_vec()).expect("claimed")).expect("the new writer");
    let refusal = key.apply(old.write(b"three".to_vec()).expect("not fenced yet")).expect_err("");
    assert!(old.write_refused(&refusal), "claims again");
    assert_eq!(old.write(b"early".to_vec()), None, "no write before that claim is answered");
    key.apply(old.claim()).expect("above the promise");
    assert_eq!(old.claimed(key.state.as_ref()), None, "a newer writer's state");
    assert!(old.is_fenced());
    assert_eq!(old.write(b"four".to_vec()), None);
    assert_eq!(old.seq(), 3, "the refused write used its number");

    // A writer outbid on every claim gives up, fenced.
    let mut late = Writer::new(1);
    let mut op = late.claim();
    let mut claims = 0;
    while let Some(next) = {
        claims += 1;
        // Another writer claims higher each time before this one's claim arrives.
        key.apply(FenceOp::Claim(key.promise.next(9))).expect("the rival");
        let refusal = key.apply(op).expect_err("outbid");
        late.claim_refused(&refusal)
    } {
        op = next;
    }
    assert_eq!(claims, Writer::CLAIM_ATTEMPTS);
    assert!(late.is_fenced());
    assert_eq!(late.ballot(), None);
}

/// A claim that reached one replica and then failed leaves its promise there; merged into the
/// others, it refuses the writer that holds the key. Nobody wrote since, so the writer claims
/// again and carries on, with the next sequence number, up to `RECLAIMS` times.
#[test]
fn a_writer_refused_by_a_claim_that_came_to_nothing_claims_again_and_carries_on() {
    let mut key = Fenced::default();
    let mut w = Writer::new(7);
    key.apply(w.claim()).expect("the first claim");
    assert_eq!(w.claimed(key.state.as_ref()), Some(b(1, 7)));
    key.apply(w.write(b"one".to_vec()).expect("claimed")).expect("written");
    for reclaim in 1..=Writer::RECLAIMS {
        // An orphaned claim above the writer's ballot.
        key.apply(FenceOp::Claim(key.promise.next(9))).expect("the orphan's claim");
        let refusal = key.apply(w.write(b"refused".to_vec()).expect("claimed")).expect_err("");
        assert!(w.write_refused(&refusal), "claim number {reclaim} made again");
        assert!(!w.is_claimed());
        let claim = w.claim();
        assert_eq!(claim, FenceOp::Claim(key.promise.next(7)));
        key.apply(claim).expect("above the orphan");
        let ballot = w.claimed(key.state.as_ref()).expect("its own state");
        let op = w.write(b"again".to_vec()).expect("claimed again");
        assert_eq!(op, write(ballot, 2 * u64::from(reclaim) + 1, b"again"));
        key.apply(op).expect("written under the new ballot");
    }
    key.apply(FenceOp::Claim(key.promise.next(9))).expect("one orphan too many");
    let refusal = key.apply(w.write(b"last".to_vec()).expect("claimed")).expect_err("");
    assert!(!w.write_refused(&refusal));
    assert!(w.is_fenced());

    // Claimed again before its first write: the state the first claim read is still its own.
    let mut key = Fenced::default();
    let mut w = Writer::new(7);
    key.apply(w.claim()).expect("the first claim");
    w.claimed(None).expect("a key never written");
    key.apply(FenceOp::Claim(key.promise.next(9))).expect("the orphan's claim");
    let refusal = key.apply(w.write(b"one".to_vec()).expect("claimed")).expect_err("");
    assert!(w.write_refused(&refusal));
    key.apply(w.claim()).expect("above the orphan");
    assert!(w.claimed(None).is_some(), "nobody wrote");
}

#[test]
fn the_writers_of_one_node_never_share_an_id_nor_a_first_ballot() {
    let node = 0x5f2c_0000_0000_0001;
    let ids: std::collections::BTreeSet<u64> =
        (0..100_000).map(|n| Writer::holder(node, n)).collect();
    assert_eq!(ids.len(), 100_000);
    // Two incarnations of an entity on one node: the second's first claim is not the first's.
    let (mut first, mut second) =
        (Writer::new(Writer::holder(node, 1)), Writer::new(Writer::holder(node, 2)));
    assert_ne!(first.claim(), second.claim());
}

fn fenced() -> impl Strategy<Value = Fenced> {
    let state = proptest::option::of((ballot(), 0..4u64, proptest::collection::vec(0..3u8, 0..2)))
        .prop_map(|s| s.map(|(ballot, seq, bytes)| Written { ballot, seq, bytes }));
    (ballot(), state).prop_map(|(promise, state)| {
        let mut f = Fenced { promise, state };
        // What replicas hold: the promise is never below the state's ballot.
        f.merge(&Fenced::default());
        f
    })
}

proptest! {
    #[test]
    fn merge_is_commutative_associative_and_idempotent(x in fenced(), y in fenced(), z in fenced()) {
        let mut xy = x.clone();
        xy.merge(&y);
        let mut yx = y.clone();
        yx.merge(&x);
        prop_assert_eq!(&xy, &yx);
        let mut xy_z = xy.clone();
        xy_z.merge(&z);
        let mut yz = y.clone();
        yz.merge(&z);
        let mut x_yz = x.clone();
        x_yz.merge(&yz);
        prop_assert_eq!(&xy_z, &x_yz);
        let mut xx = x.clone();
        xx.merge(&x);
        prop_assert_eq!(&xx, &x);
    }

    #[test]
    fn a_merge_never_loses_the_later_state_nor_lowers_the_promise(x in fenced(), y in fenced()) {
        let mut m = x.clone();
        m.merge(&y);
        prop_assert!(m.promise >= x.promise && m.promise >= y.promise);
        prop_assert!(m.state >= x.state && m.state >= y.state);
    }
}
