//! Vector clocks over node incarnations.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BTreeMap;

use crate::address::UniqueAddress;

/// How two vector clocks relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// Identical.
    Same,
    /// `a` happened before `b`.
    Before,
    /// `a` happened after `b`.
    After,
    /// Neither dominates.
    Concurrent,
}

/// A vector clock: one counter per node that changed the gossip. Missing entries count as 0.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VectorClock {
    entries: BTreeMap<UniqueAddress, u64>,
}

impl VectorClock {
    /// An empty clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock from entries (zero counters are dropped).
    pub fn from_entries(entries: impl IntoIterator<Item = (UniqueAddress, u64)>) -> Self {
        Self { entries: entries.into_iter().filter(|(_, v)| *v > 0).collect() }
    }

    /// Bumps `node`'s counter.
    pub fn increment(&mut self, node: &UniqueAddress) {
        *self.entries.entry(node.clone()).or_insert(0) += 1;
    }

    /// `node`'s counter (0 when absent).
    pub fn counter(&self, node: &UniqueAddress) -> u64 {
        self.entries.get(node).copied().unwrap_or(0)
    }

    /// The entries, ordered by node.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&UniqueAddress, u64)> {
        self.entries.iter().map(|(k, v)| (k, *v))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no node has an entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Compares two clocks component-wise.
    pub fn compare(&self, other: &VectorClock) -> Ordering {
        let (mut less, mut greater) = (false, false);
        let mut a = self.entries.iter().peekable();
        let mut b = other.entries.iter().peekable();
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(_), None) => {
                    greater = true;
                    break;
                }
                (None, Some(_)) => {
                    less = true;
                    break;
                }
                (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                    CmpOrdering::Less => {
                        greater = true;
                        a.next();
                    }
                    CmpOrdering::Greater => {
                        less = true;
                        b.next();
                    }
                    CmpOrdering::Equal => {
                        match va.cmp(vb) {
                            CmpOrdering::Less => less = true,
                            CmpOrdering::Greater => greater = true,
                            CmpOrdering::Equal => {}
                        }
                        a.next();
                        b.next();
                    }
                },
            }
            if less && greater {
                return Ordering::Concurrent;
            }
        }
        match (less, greater) {
            (false, false) => Ordering::Same,
            (true, false) => Ordering::Before,
            (false, true) => Ordering::After,
            (true, true) => Ordering::Concurrent,
        }
    }

    /// The pointwise maximum: the least upper bound of both clocks.
    pub fn merge(&self, other: &VectorClock) -> VectorClock {
        let mut entries = self.entries.clone();
        for (k, v) in &other.entries {
            let e = entries.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
        VectorClock { entries }
    }

    /// Drops `node`'s entry (done when the node is removed from the cluster).
    pub fn prune(&mut self, node: &UniqueAddress) {
        self.entries.remove(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::tests::node;
    use proptest::prelude::*;

    fn clock(pairs: &[(u64, u64)]) -> VectorClock {
        VectorClock::from_entries(pairs.iter().map(|(n, v)| (node("h:1", *n), *v)))
    }

    #[test]
    fn empty_clocks_are_the_same() {
        assert_eq!(VectorClock::new().compare(&VectorClock::new()), Ordering::Same);
    }

    #[test]
    fn an_increment_happens_after_the_original() {
        let a = clock(&[(1, 1)]);
        let mut b = a.clone();
        b.increment(&node("h:1", 1));
        assert_eq!(a.compare(&b), Ordering::Before);
        assert_eq!(b.compare(&a), Ordering::After);
        let mut c = a.clone();
        c.increment(&node("h:1", 2));
        assert_eq!(c.compare(&a), Ordering::After);
        assert_eq!(a.compare(&c), Ordering::Before);
    }

    #[test]
    fn independent_increments_are_concurrent() {
        let a = clock(&[(1, 2), (2, 1)]);
        let b = clock(&[(1, 1), (2, 2)]);
        assert_eq!(a.compare(&b), Ordering::Concurrent);
        let c = clock(&[(1, 1)]);
        let d = clock(&[(2, 1)]);
        assert_eq!(c.compare(&d), Ordering::Concurrent);
    }

    #[test]
    fn merge_takes_the_pointwise_maximum_and_dominates_both() {
        let a = clock(&[(1, 3), (2, 1)]);
        let b = clock(&[(2, 4), (3, 1)]);
        let m = a.merge(&b);
        assert_eq!(m, clock(&[(1, 3), (2, 4), (3, 1)]));
        assert_eq!(a.compare(&m), Ordering::Before);
        assert_eq!(b.compare(&m), Ordering::Before);
    }

    #[test]
    fn pruning_forgets_a_node() {
        let mut a = clock(&[(1, 3), (2, 1)]);
        a.prune(&node("h:1", 2));
        assert_eq!(a, clock(&[(1, 3)]));
        assert_eq!(a.counter(&node("h:1", 2)), 0);
    }

    fn arb_clock() -> impl Strategy<Value = VectorClock> {
        prop::collection::btree_map(1u64..6, 0u64..4, 0..5).prop_map(|m| {
            VectorClock::from_entries(m.into_iter().map(|(n, v)| (node("h:1", n), v)))
        })
    }

    fn le(a: &VectorClock, b: &VectorClock) -> bool {
        matches!(a.compare(b), Ordering::Same | Ordering::Before)
    }

    proptest! {
        #[test]
        fn merge_is_the_least_upper_bound(a in arb_clock(), b in arb_clock(), c in arb_clock()) {
            let m = a.merge(&b);
            prop_assert!(le(&a, &m) && le(&b, &m));
            // Least: any upper bound of both is also an upper bound of the merge.
            if le(&a, &c) && le(&b, &c) {
                prop_assert!(le(&m, &c));
            }
            prop_assert_eq!(m.clone(), b.merge(&a));
            prop_assert_eq!(a.merge(&a), a.clone());
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
        }

        #[test]
        fn compare_is_antisymmetric(a in arb_clock(), b in arb_clock()) {
            let expected = match a.compare(&b) {
                Ordering::Same => Ordering::Same,
                Ordering::Before => Ordering::After,
                Ordering::After => Ordering::Before,
                Ordering::Concurrent => Ordering::Concurrent,
            };
            prop_assert_eq!(b.compare(&a), expected);
            prop_assert_eq!(a.compare(&b) == Ordering::Same, a == b);
        }
    }
}
