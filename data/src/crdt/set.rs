//! The observed-remove set (an add wins over a remove that did not see it), and the map built
//! the same way.
//!
//! Both keep, per element, the dots of the adds that are still current, each with what that add
//! wrote (nothing for a set, the whole value for a map), and a context of every dot seen: a merge
//! keeps a dot that both sides hold, or that one holds and the other has not seen, and so tells
//! "removed here" (seen, gone) from "not yet here" (not seen). A dot's content never changes
//! after the add that made it, which is what makes the merge a join.
//!
//! An actor must make its adds on state that holds every dot it made before: the store's
//! coordinator updates the key's merged current value on a replica it coordinates as
//! (`docs/data.md`, "Actors").

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Crdt, KindMismatch};
use crate::version::{ActorId, Dot, VersionVector};

/// Elements (or keys) with the dots of their current adds, and the context of every dot seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Dotted<V> {
    entries: BTreeMap<String, BTreeMap<Dot, V>>,
    context: VersionVector,
}

impl<V> Default for Dotted<V> {
    fn default() -> Self {
        Self { entries: BTreeMap::new(), context: VersionVector::new() }
    }
}

impl<V: Clone> Dotted<V> {
    /// `actor` adds `element` with `content`: one new dot replaces the ones seen here.
    fn add(&mut self, actor: ActorId, element: String, content: V) {
        let dot = Dot { actor, counter: self.context.get(actor) + 1 };
        self.context.observe(actor, dot.counter);
        self.entries.insert(element, BTreeMap::from([(dot, content)]));
    }

    fn remove(&mut self, element: &str) {
        self.entries.remove(element);
    }

    fn merge(&mut self, other: &Self) {
        let names: BTreeSet<&String> = self.entries.keys().chain(other.entries.keys()).collect();
        let none = BTreeMap::new();
        let mut merged = BTreeMap::new();
        for name in names {
            let mine = self.entries.get(name).unwrap_or(&none);
            let theirs = other.entries.get(name).unwrap_or(&none);
            let dots: BTreeMap<Dot, V> = mine
                .iter()
                .filter(|(d, _)| theirs.contains_key(d) || !other.context.contains(**d))
                .chain(theirs.iter().filter(|(d, _)| !self.context.contains(**d)))
                .map(|(d, v)| (*d, v.clone()))
                .collect();
            if !dots.is_empty() {
                merged.insert(name.clone(), dots);
            }
        }
        self.entries = merged;
        self.context.merge(&other.context);
    }
}

/// A set of strings where an add wins over a remove that did not see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrSet(Dotted<()>);

impl OrSet {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `element` is in it.
    pub fn contains(&self, element: &str) -> bool {
        self.0.entries.contains_key(element)
    }

    /// The elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.entries.keys().map(String::as_str)
    }

    /// How many elements.
    pub fn len(&self) -> usize {
        self.0.entries.len()
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.0.entries.is_empty()
    }

    /// `actor` adds `element`.
    pub fn add(&mut self, actor: ActorId, element: impl Into<String>) {
        self.0.add(actor, element.into(), ());
    }

    /// Removes `element` as seen here (an add elsewhere that this replica has not seen stays).
    pub fn remove(&mut self, element: &str) {
        self.0.remove(element);
    }

    /// Takes in another replica's set.
    pub fn merge(&mut self, other: &Self) {
        self.0.merge(&other.0);
    }

    /// Actors named in its context.
    pub fn actor_count(&self) -> usize {
        self.0.context.len()
    }
}

/// A map from strings to CRDT values where an update wins over a removal that did not see it.
/// Each update stores the key's whole new value under a new dot; the value of a key is the join
/// of its current dots' values. Values of two kinds at one key (created concurrently:
/// [`OrMap::update`] refuses a kind change it can see) resolve to the join of those of the
/// greater kind, a rule every replica applies alike.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrMap(Dotted<Crdt>);

impl OrMap {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<Crdt> {
        self.0.entries.get(key).and_then(|dots| join(dots.values()))
    }

    /// Keys and values, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Crdt)> + '_ {
        self.0.entries.iter().filter_map(|(k, dots)| Some((k.as_str(), join(dots.values())?)))
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.entries.len()
    }

    /// Whether it has no key.
    pub fn is_empty(&self) -> bool {
        self.0.entries.is_empty()
    }

    /// `actor` updates the value at `key` with `f`, starting from `empty` when the key is absent.
    /// Refused, with nothing changed, when the value there is of another kind than `empty`.
    pub fn update(
        &mut self,
        actor: ActorId,
        key: &str,
        empty: Crdt,
        f: impl FnOnce(&mut Crdt),
    ) -> Result<(), KindMismatch> {
        let mut value = match self.get(key) {
            Some(v) if v.kind() != empty.kind() => {
                return Err(KindMismatch { expected: empty.kind(), found: v.kind() });
            }
            Some(v) => v,
            None => empty,
        };
        f(&mut value);
        self.0.add(actor, key.to_owned(), value);
        Ok(())
    }

    /// Removes `key` and its value as seen here.
    pub fn remove(&mut self, key: &str) {
        self.0.remove(key);
    }

    /// Takes in another replica's map.
    pub fn merge(&mut self, other: &Self) {
        self.0.merge(&other.0);
    }

    /// Actors named in it, its context and its values together.
    pub fn actor_count(&self) -> usize {
        let values: usize =
            self.0.entries.values().flat_map(|d| d.values()).map(Crdt::actor_count).sum();
        self.0.context.len() + values
    }
}

/// The join of `values`: of those of the greatest kind among them.
fn join<'a>(values: impl Iterator<Item = &'a Crdt> + Clone) -> Option<Crdt> {
    let kind = values.clone().map(Crdt::kind).max()?;
    let mut of_kind = values.filter(|v| v.kind() == kind);
    let mut joined = of_kind.next()?.clone();
    for v in of_kind {
        let _ = joined.merge(v);
    }
    Some(joined)
}
