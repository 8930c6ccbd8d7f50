use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

const A: ActorId = ActorId(1);
const B: ActorId = ActorId(2);
const C: ActorId = ActorId(3);

fn values(v: &Versions<&'static str>) -> Vec<&'static str> {
    let mut out: Vec<_> = v.values().map(|(_, x)| *x).collect();
    out.sort_unstable();
    out
}

#[test]
fn a_write_with_the_context_it_read_supersedes_what_it_read() {
    let mut r = Versions::new();
    r.write(A, &VersionVector::new(), "v1");
    let ctx = r.context();
    let dot = r.write(A, &ctx, "v2");
    assert_eq!(dot, Dot { actor: A, counter: 2 });
    assert_eq!(values(&r), ["v2"]);
    assert_eq!(r.context(), [(A, 2)].into_iter().collect());
}

#[test]
fn writes_that_did_not_see_each_other_stay_as_siblings_until_one_sees_both() {
    let mut r = Versions::new();
    r.write(A, &VersionVector::new(), "v1");
    let read = r.context();
    // Two clients read v1 and write, through two coordinators.
    let mut other = r.clone();
    r.write(A, &read, "from-a");
    other.write(B, &read, "from-b");
    r.merge(&other);
    assert_eq!(values(&r), ["from-a", "from-b"]);
    // A write with the merged context resolves them.
    let both = r.context();
    r.write(C, &both, "resolved");
    assert_eq!(values(&r), ["resolved"]);
}

#[test]
fn a_write_with_an_empty_context_supersedes_nothing() {
    let mut r = Versions::new();
    r.write(A, &VersionVector::new(), "v1");
    r.write(A, &VersionVector::new(), "blind");
    assert_eq!(values(&r), ["blind", "v1"]);
    assert_eq!(r.value_count(), 2);
}

#[test]
fn a_stale_replica_does_not_descend_from_the_merged_versions_and_a_repaired_one_does() {
    let mut fresh = Versions::new();
    fresh.write(A, &VersionVector::new(), "v1");
    let stale = fresh.clone();
    let ctx = fresh.context();
    fresh.write(B, &ctx, "v2");
    assert!(fresh.descends(&stale));
    assert!(!stale.descends(&fresh));
    let mut repaired = stale.clone();
    repaired.merge(&fresh);
    assert_eq!(repaired, fresh);
    assert!(repaired.descends(&fresh));
}

#[test]
fn a_context_that_saw_writes_this_replica_missed_supersedes_them_when_they_arrive() {
    let mut r1 = Versions::new();
    r1.write(A, &VersionVector::new(), "v1");
    let mut r2 = Versions::new();
    // A client read v1 from r1 and writes through B, whose replica never got v1.
    let seen = r1.context();
    r2.write(B, &seen, "v2");
    r1.merge(&r2);
    assert_eq!(values(&r1), ["v2"]);
}

/// The obvious model: the current values with explicit dots, and the set of every dot seen.
#[derive(Clone, Debug, Default)]
struct Model {
    current: BTreeSet<(Dot, u32)>,
    seen: BTreeSet<Dot>,
}

impl Model {
    fn write(&mut self, actor: ActorId, context: &BTreeSet<Dot>, value: u32) {
        self.current.retain(|(d, _)| !context.contains(d));
        self.seen.extend(context.iter().copied());
        let counter = self.seen.iter().filter(|d| d.actor == actor).map(|d| d.counter).max();
        let counter = counter.unwrap_or(0) + 1;
        let dot = Dot { actor, counter };
        self.seen.insert(dot);
        self.current.insert((dot, value));
    }

    fn merge(&mut self, other: &Self) {
        // A value stays if the other side holds it too, or has not seen its dot.
        let keep =
            |x: &(Dot, u32), other: &Self| other.current.contains(x) || !other.seen.contains(&x.0);
        let mine: BTreeSet<_> = self.current.iter().filter(|x| keep(x, other)).copied().collect();
        let theirs: BTreeSet<_> = other.current.iter().filter(|x| keep(x, self)).copied().collect();
        self.current = mine.union(&theirs).copied().collect();
        self.seen.extend(other.seen.iter().copied());
    }
}

fn expand(v: &VersionVector) -> BTreeSet<Dot> {
    v.iter().flat_map(|(actor, n)| (1..=n).map(move |counter| Dot { actor, counter })).collect()
}

#[derive(Clone, Debug)]
enum Op {
    /// Replica `at` coordinates a write as actor `at`, with the context a client read from
    /// replica `read` (or none).
    Write { at: usize, read: Option<usize>, value: u32 },
    /// Replica `into` takes in replica `from`'s versions.
    Merge { into: usize, from: usize },
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        (0..3usize, proptest::option::of(0..3usize), any::<u32>())
            .prop_map(|(at, read, value)| Op::Write { at, read, value }),
        (0..3usize, 0..3usize).prop_map(|(into, from)| Op::Merge { into, from }),
    ];
    proptest::collection::vec(op, 0..40)
}

/// Runs `ops` on three replicas, each the actor of its own index; also returns the model's.
fn run(ops: &[Op]) -> (Vec<Versions<u32>>, Vec<Model>) {
    let mut reps = vec![Versions::new(); 3];
    let mut models = vec![Model::default(); 3];
    for op in ops {
        match *op {
            Op::Write { at, read, value } => {
                let ctx = read.map(|r| reps[r].context()).unwrap_or_default();
                let model_ctx = read.map(|r| models[r].seen.clone()).unwrap_or_default();
                reps[at].write(ActorId(at as u64), &ctx, value);
                models[at].write(ActorId(at as u64), &model_ctx, value);
            }
            Op::Merge { into, from } => {
                let theirs = reps[from].clone();
                reps[into].merge(&theirs);
                let theirs = models[from].clone();
                models[into].merge(&theirs);
            }
        }
    }
    (reps, models)
}

fn as_set(v: &Versions<u32>) -> BTreeSet<(Dot, u32)> {
    v.values().map(|(d, x)| (d, *x)).collect()
}

proptest! {
    #[test]
    fn versions_hold_exactly_what_the_model_of_explicit_dots_holds(ops in ops()) {
        let (reps, models) = run(&ops);
        for (r, m) in reps.iter().zip(&models) {
            prop_assert_eq!(as_set(r), m.current.clone());
            prop_assert_eq!(expand(&r.context()), m.seen.clone());
        }
    }

    #[test]
    fn merge_is_commutative_associative_and_idempotent(ops in ops()) {
        let (reps, _) = run(&ops);
        let (a, b, c) = (&reps[0], &reps[1], &reps[2]);
        let merged = |x: &Versions<u32>, y: &Versions<u32>| {
            let mut m = x.clone();
            m.merge(y);
            m
        };
        prop_assert_eq!(merged(a, b), merged(b, a));
        prop_assert_eq!(merged(&merged(a, b), c), merged(a, &merged(b, c)));
        prop_assert_eq!(merged(a, a), a.clone());
    }

    #[test]
    fn descends_says_whether_a_merge_would_change_anything(ops in ops()) {
        let (reps, _) = run(&ops);
        for x in &reps {
            for y in &reps {
                let mut m = x.clone();
                m.merge(y);
                prop_assert_eq!(x.descends(y), &m == x);
            }
        }
    }
}
