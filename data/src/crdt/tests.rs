use proptest::prelude::*;

use super::*;

const A: ActorId = ActorId(1);
const B: ActorId = ActorId(2);

fn merged(a: &Crdt, b: &Crdt) -> Crdt {
    let mut m = a.clone();
    m.merge(b).expect("same kind");
    m
}

#[test]
fn counters_count_every_replica_s_increments_once_however_often_they_merge() {
    let mut a = CrdtKind::PnCounter.empty();
    let mut b = a.clone();
    a.apply(A, 0, CrdtOp::Add(5)).expect("pn-counter");
    b.apply(B, 0, CrdtOp::Add(-2)).expect("pn-counter");
    b.apply(B, 0, CrdtOp::Add(1)).expect("pn-counter");
    let m = merged(&merged(&a, &b), &b);
    let Crdt::PNCounter(c) = m else { panic!("a pn-counter") };
    assert_eq!(c.value(), 4);
}

#[test]
fn an_add_wins_over_a_remove_that_did_not_see_it_and_loses_to_one_that_did() {
    let mut a = OrSet::new();
    a.add(A, "x");
    let mut b = a.clone();
    // b removes the x it saw while a adds x again: the new add wins.
    b.remove("x");
    a.add(A, "x");
    let mut m = a.clone();
    m.merge(&b);
    assert!(m.contains("x"));
    // A remove that saw every add removes it everywhere.
    let mut c = m.clone();
    c.remove("x");
    let mut back = m.clone();
    back.merge(&c);
    assert!(!back.contains("x"));
    assert!(back.is_empty());
}

#[test]
fn an_element_not_yet_seen_is_not_taken_for_removed() {
    let a = OrSet::new();
    let mut b = OrSet::new();
    b.add(B, "y");
    let mut m = a.clone();
    m.merge(&b);
    assert_eq!(m.elements().collect::<Vec<_>>(), ["y"]);
}

#[test]
fn the_later_write_wins_in_a_register_and_a_write_after_a_read_wins_even_with_a_clock_behind() {
    let mut a = LwwRegister::new();
    a.set(A, 1_000, b"first".to_vec());
    let mut b = a.clone();
    // b's clock is behind a's, but it wrote after reading a's value.
    b.set(B, 500, b"second".to_vec());
    let mut m = a.clone();
    m.merge(&b);
    assert_eq!(m.value(), b"second");
    assert_eq!(m.written(), Some((1_001, B)));
}

#[test]
fn a_map_merges_the_values_of_its_keys_and_refuses_a_change_of_kind() {
    let mut a = CrdtKind::OrMap.empty();
    let mut b = a.clone();
    let inc = |n| CrdtOp::Update {
        key: "hits".into(),
        kind: CrdtKind::GCounter,
        op: Box::new(CrdtOp::Increment(n)),
    };
    a.apply(A, 0, inc(2)).expect("or-map");
    b.apply(B, 0, inc(3)).expect("or-map");
    let m = merged(&a, &b);
    let Crdt::OrMap(map) = &m else { panic!("an or-map") };
    assert_eq!(
        map.get("hits"),
        Some(Crdt::GCounter({
            let mut g = GCounter::new();
            g.increment(A, 2);
            g.increment(B, 3);
            g
        }))
    );
    let flag =
        CrdtOp::Update { key: "hits".into(), kind: CrdtKind::Flag, op: Box::new(CrdtOp::Enable) };
    let mut changed = m.clone();
    let err = changed.apply(A, 0, flag).expect_err("a g-counter is there");
    assert_eq!(err.to_string(), "the value is a g-counter, not a flag");
    assert_eq!(changed, m, "nothing changed");
}

#[test]
fn an_operation_for_another_kind_is_refused_and_changes_nothing() {
    let mut c = CrdtKind::GCounter.empty();
    let err = c.apply(A, 0, CrdtOp::Insert("x".into())).expect_err("not a set");
    assert_eq!(err, KindMismatch { expected: CrdtKind::OrSet, found: CrdtKind::GCounter });
    assert_eq!(c, CrdtKind::GCounter.empty());
    assert!(c.merge(&CrdtKind::Flag.empty()).is_err());
}

fn op_for(kind: CrdtKind) -> BoxedStrategy<CrdtOp> {
    let element = prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(String::from);
    match kind {
        CrdtKind::GCounter => (0..5u64).prop_map(CrdtOp::Increment).boxed(),
        CrdtKind::PnCounter => (-5..5i64).prop_map(CrdtOp::Add).boxed(),
        CrdtKind::Flag => Just(CrdtOp::Enable).boxed(),
        CrdtKind::LwwRegister => {
            proptest::collection::vec(any::<u8>(), 0..3).prop_map(CrdtOp::Set).boxed()
        }
        CrdtKind::OrSet => {
            prop_oneof![element.clone().prop_map(CrdtOp::Insert), element.prop_map(CrdtOp::Remove),]
                .boxed()
        }
        CrdtKind::OrMap => prop_oneof![
            (element.clone(), -3..3i64).prop_map(|(key, n)| CrdtOp::Update {
                key,
                kind: CrdtKind::PnCounter,
                op: Box::new(CrdtOp::Add(n)),
            }),
            (element.clone(), element.clone()).prop_map(|(key, e)| CrdtOp::Update {
                key,
                kind: CrdtKind::OrSet,
                op: Box::new(CrdtOp::Insert(e)),
            }),
            element.prop_map(CrdtOp::Delete),
        ]
        .boxed(),
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// Replica `at` applies an operation at time `ms`.
    Apply { at: usize, ms: u64, op: CrdtOp },
    /// Replica `into` takes in replica `from`'s state.
    Merge { into: usize, from: usize },
}

fn kinds() -> impl Strategy<Value = CrdtKind> {
    prop_oneof![
        Just(CrdtKind::GCounter),
        Just(CrdtKind::PnCounter),
        Just(CrdtKind::Flag),
        Just(CrdtKind::LwwRegister),
        Just(CrdtKind::OrSet),
        Just(CrdtKind::OrMap),
    ]
}

/// A kind and steps for it on three replicas.
fn histories() -> impl Strategy<Value = (CrdtKind, Vec<Step>)> {
    kinds().prop_flat_map(|kind| {
        let step = prop_oneof![
            (0..3usize, 0..20u64, op_for(kind)).prop_map(|(at, ms, op)| Step::Apply { at, ms, op }),
            (0..3usize, 0..3usize).prop_map(|(into, from)| Step::Merge { into, from }),
        ];
        (Just(kind), proptest::collection::vec(step, 0..30))
    })
}

/// Three replicas, each the actor of its index, after `steps`.
fn replicas(kind: CrdtKind, steps: &[Step]) -> Vec<Crdt> {
    let mut reps = vec![kind.empty(); 3];
    for step in steps {
        match step {
            Step::Apply { at, ms, op } => {
                // A map refuses to change a key's kind; refused, it is left as it was.
                let before = reps[*at].clone();
                if reps[*at].apply(ActorId(*at as u64), *ms, op.clone()).is_err() {
                    assert_eq!(reps[*at], before, "a refused operation changed the value");
                }
            }
            Step::Merge { into, from } => {
                let theirs = reps[*from].clone();
                reps[*into].merge(&theirs).expect("same kind");
            }
        }
    }
    reps
}

proptest! {
    #[test]
    fn every_crdt_merge_is_commutative_associative_and_idempotent((kind, steps) in histories()) {
        let reps = replicas(kind, &steps);
        let (a, b, c) = (&reps[0], &reps[1], &reps[2]);
        prop_assert_eq!(merged(a, b), merged(b, a));
        prop_assert_eq!(merged(&merged(a, b), c), merged(a, &merged(b, c)));
        prop_assert_eq!(merged(a, a), a.clone());
    }

    #[test]
    fn a_merge_keeps_what_either_side_held_that_the_other_did_not_remove(
        (kind, steps) in histories()
    ) {
        // Inflation: merging never loses an update one side has and the other never saw, so
        // merging the result into either side changes nothing more.
        let reps = replicas(kind, &steps);
        let m = merged(&reps[0], &reps[1]);
        prop_assert_eq!(merged(&m, &reps[0]), m.clone());
        prop_assert_eq!(merged(&m, &reps[1]), m);
    }
}
