//! Versions of a key: dotted version vectors, kept as a *DVV set* (one entry per writer, each with
//! its count of writes and the values of its latest ones that are still current).
//!
//! Every write is coordinated by one replica, the *actor*, which gives it a [`Dot`]: its own next
//! write count for the key. A write carries the *context* its client read (a [`VersionVector`]):
//! it supersedes exactly the values that context covers and nothing else, so two writes that did
//! not see each other both stay, as siblings, until a write whose context covers both. A dot
//! names one value for ever; merging two replicas' versions keeps every value that one side holds
//! and the other has not yet superseded.
//!
//! Why the compact form is exact: an actor's values that are current are always its latest ones,
//! with consecutive counts. A context covers an actor's writes up to some count, so a write drops
//! the oldest of them, never one in the middle; merge drops the same. See `docs/data.md`.
//!
//! An actor is a node *incarnation* (its uid), not a node address: a process restarted after a
//! crash may have lost writes it had not yet synced, and with a fresh actor it can never give a
//! second value a dot that another replica already holds.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry as MapEntry;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Who coordinated a write: a node incarnation, by its uid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ActorId(pub u64);

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// One write: the `counter`-th write to a key coordinated by `actor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dot {
    /// The coordinating actor.
    pub actor: ActorId,
    /// Its count of writes to the key, this one included (from 1).
    pub counter: u64,
}

/// A causal context: for each actor, how many of its writes have been seen.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VersionVector(BTreeMap<ActorId, u64>);

impl VersionVector {
    /// The empty context: a client that read nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many of `actor`'s writes it has seen.
    pub fn get(&self, actor: ActorId) -> u64 {
        self.0.get(&actor).copied().unwrap_or(0)
    }

    /// Raises `actor`'s count to `counter` (never lowers it).
    pub fn observe(&mut self, actor: ActorId, counter: u64) {
        if counter == 0 {
            return;
        }
        let n = self.0.entry(actor).or_insert(0);
        *n = (*n).max(counter);
    }

    /// Whether it has seen `dot`.
    pub fn contains(&self, dot: Dot) -> bool {
        self.get(dot.actor) >= dot.counter
    }

    /// Whether it has seen everything `other` has.
    pub fn descends(&self, other: &Self) -> bool {
        other.0.iter().all(|(a, n)| self.get(*a) >= *n)
    }

    /// Takes in everything `other` has seen.
    pub fn merge(&mut self, other: &Self) {
        for (a, n) in &other.0 {
            self.observe(*a, *n);
        }
    }

    /// Whether it has seen nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Actors and counts, by actor.
    pub fn iter(&self) -> impl Iterator<Item = (ActorId, u64)> + '_ {
        self.0.iter().map(|(a, n)| (*a, *n))
    }

    /// Actors it names.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl FromIterator<(ActorId, u64)> for VersionVector {
    fn from_iter<I: IntoIterator<Item = (ActorId, u64)>>(iter: I) -> Self {
        let mut v = Self::new();
        for (a, n) in iter {
            v.observe(a, n);
        }
        v
    }
}

/// One actor's part of a key's versions: its write count, and the values of its latest writes
/// that are still current, newest first (`values[i]` has the dot `counter - i`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry<V> {
    counter: u64,
    values: Vec<V>,
}

impl<V> Default for Entry<V> {
    fn default() -> Self {
        Self { counter: 0, values: Vec::new() }
    }
}

/// The versions of one key as a replica holds them: the current values (siblings when more than
/// one) with their dots, and the context of every write seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions<V> {
    entries: BTreeMap<ActorId, Entry<V>>,
}

impl<V> Default for Versions<V> {
    fn default() -> Self {
        Self { entries: BTreeMap::new() }
    }
}

impl<V: Clone> Versions<V> {
    /// No write seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no write was seen.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The context of every write seen: what a client that read these versions passes back with
    /// its next write.
    pub fn context(&self) -> VersionVector {
        self.entries.iter().map(|(a, e)| (*a, e.counter)).collect()
    }

    /// The current values with their dots, by actor, newest first within an actor.
    pub fn values(&self) -> impl Iterator<Item = (Dot, &V)> + '_ {
        self.entries.iter().flat_map(|(a, e)| {
            e.values
                .iter()
                .enumerate()
                .map(move |(i, v)| (Dot { actor: *a, counter: e.counter - i as u64 }, v))
        })
    }

    /// How many current values there are (more than one: siblings).
    pub fn value_count(&self) -> usize {
        self.entries.values().map(|e| e.values.len()).sum()
    }

    /// Actors named (the length of the context).
    pub fn actor_count(&self) -> usize {
        self.entries.len()
    }

    /// A write of `value` coordinated by `actor`, by a client that had read `context`: every
    /// current value `context` covers is superseded, the others stay as siblings, and the new
    /// value gets `actor`'s next dot, which is returned.
    pub fn write(&mut self, actor: ActorId, context: &VersionVector, value: V) -> Dot {
        for (a, e) in &mut self.entries {
            let seen = context.get(*a);
            let current = e.counter.saturating_sub(seen);
            e.values.truncate(usize::try_from(current).unwrap_or(usize::MAX));
            e.counter = e.counter.max(seen);
        }
        for (a, n) in context.iter() {
            self.entries.entry(a).or_insert_with(|| Entry { counter: n, values: Vec::new() });
        }
        let e = self.entries.entry(actor).or_default();
        e.counter += 1;
        e.values.insert(0, value);
        Dot { actor, counter: e.counter }
    }

    /// Takes in another replica's versions of the same key: a value stays if either side holds
    /// it and the other has not superseded it.
    pub fn merge(&mut self, other: &Self) {
        for (a, theirs) in &other.entries {
            match self.entries.entry(*a) {
                MapEntry::Vacant(v) => {
                    v.insert(theirs.clone());
                }
                MapEntry::Occupied(mut o) => {
                    let ours = o.get_mut();
                    if ours.counter >= theirs.counter {
                        let keep = current_after(ours, theirs);
                        ours.values.truncate(keep);
                    } else {
                        let keep = current_after(theirs, ours);
                        ours.counter = theirs.counter;
                        ours.values = theirs.values[..keep].to_vec();
                    }
                }
            }
        }
    }

    /// Whether it is as this module builds them: every actor has written at least once and at
    /// least as often as it has current values. Versions read off the wire are checked with it
    /// before anything else reads them.
    pub fn is_well_formed(&self) -> bool {
        self.entries.values().all(|e| e.counter > 0 && e.values.len() as u64 <= e.counter)
    }

    /// Drops every current value, keeping the context: what the key's history has seen stays
    /// known, so no value it superseded can come back, but nothing is stored for the values.
    pub fn clear_values(&mut self) {
        for e in self.entries.values_mut() {
            e.values.clear();
        }
    }

    /// Whether these versions know everything `other` knows: merging `other` in would change
    /// nothing. A replica whose versions do not descend from a read's merged result is stale.
    pub fn descends(&self, other: &Self) -> bool {
        other.entries.iter().all(|(a, theirs)| {
            self.entries.get(a).is_some_and(|ours| {
                ours.counter >= theirs.counter && current_after(ours, theirs) == ours.values.len()
            })
        })
    }
}

/// How many of `newer`'s values stay when merged with `older`, whose count is not higher:
/// those `older` has not seen, and those it still holds.
fn current_after<V>(newer: &Entry<V>, older: &Entry<V>) -> usize {
    let unseen = newer.counter - older.counter;
    let held = older.values.len() as u64;
    usize::try_from(unseen.saturating_add(held)).unwrap_or(usize::MAX).min(newer.values.len())
}

#[cfg(test)]
mod tests;
