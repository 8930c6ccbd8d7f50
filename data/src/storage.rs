//! Where a replica keeps its objects: the interface the store's machine writes through, and an
//! in-memory implementation for tests and the simulator.
//!
//! The machine stages writes with [`Storage::put`] and acknowledges none of them until the
//! driver has called [`Store::sync`](crate::Store::sync), which calls [`Storage::sync`]: every
//! write staged since is then durable. Writes staged by many requests go to disk together (a
//! group commit), and no replica acknowledges what a crash could still take away.

use std::collections::BTreeMap;
use std::convert::Infallible;

use convoke_membership::Address;

use crate::object::{Key, Object};
use crate::ring::{Span, hash};

/// A replica's durable objects, and the writes it holds for other replicas (hints).
pub trait Storage {
    /// What the storage can fail with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The object under `key`, with every staged write included.
    fn get(&mut self, key: &Key) -> Result<Option<Object>, Self::Error>;

    /// Stages `object` as the one under `key`.
    fn put(&mut self, key: &Key, object: &Object) -> Result<(), Self::Error>;

    /// Up to `limit` objects whose keys hash into `span`, in the order of (hash, key), starting
    /// after `after` when given (a cursor: the last key of the previous page), staged writes
    /// included. Objects are kept in that order so that a range of the ring is one range of the
    /// storage.
    fn scan(
        &mut self,
        span: Span,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<(Key, Object)>, Self::Error>;

    /// Stages the removal of `key`.
    fn remove(&mut self, key: &Key) -> Result<(), Self::Error>;

    /// The write held for `replica` under `key`, if any.
    fn hint(&mut self, replica: &Address, key: &Key) -> Result<Option<Object>, Self::Error>;

    /// Stages `object` as the write held for `replica` under `key`.
    fn put_hint(
        &mut self,
        replica: &Address,
        key: &Key,
        object: &Object,
    ) -> Result<(), Self::Error>;

    /// Stages the removal of the write held for `replica` under `key`.
    fn remove_hint(&mut self, replica: &Address, key: &Key) -> Result<(), Self::Error>;

    /// Every (replica, key) a write is held for, as the storage holds them at start.
    fn hints(&mut self) -> Result<Vec<(Address, Key)>, Self::Error>;

    /// The members of the ring as this replica last saw it, then of each ring it still
    /// remembered, newest first (none in a new storage): what a restarted node waits for
    /// before keys move (docs/data.md, "Absent holders").
    fn rings(&mut self) -> Result<Vec<Vec<Address>>, Self::Error>;

    /// Stages `rings` (the current ring's members, then the remembered rings', newest first).
    fn put_rings(&mut self, rings: &[Vec<Address>]) -> Result<(), Self::Error>;

    /// Makes every staged write durable.
    fn sync(&mut self) -> Result<(), Self::Error>;
}

/// Objects and hints in memory. What was staged since the last [`Storage::sync`] is lost by
/// [`MemoryStorage::crash`], as a process crash loses what it had not synced.
#[derive(Clone, Debug, Default)]
pub struct MemoryStorage {
    /// By (hash of the key, key).
    objects: BTreeMap<(u64, Key), Object>,
    hints: BTreeMap<(Address, Key), Object>,
    rings: Vec<Vec<Address>>,
    /// What each entry changed since the last sync held before, for a crash to restore.
    undo: BTreeMap<Slot, Option<Object>>,
    /// The rings as of the last sync, when they changed since.
    rings_undo: Option<Vec<Vec<Address>>>,
}

/// An entry of [`MemoryStorage`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Object(u64, Key),
    Hint(Address, Key),
}

impl MemoryStorage {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops every write staged since the last sync.
    pub fn crash(&mut self) {
        for (slot, before) in std::mem::take(&mut self.undo) {
            match (slot, before) {
                (Slot::Object(h, k), Some(o)) => drop(self.objects.insert((h, k), o)),
                (Slot::Object(h, k), None) => drop(self.objects.remove(&(h, k))),
                (Slot::Hint(a, k), Some(o)) => drop(self.hints.insert((a, k), o)),
                (Slot::Hint(a, k), None) => drop(self.hints.remove(&(a, k))),
            }
        }
        if let Some(rings) = self.rings_undo.take() {
            self.rings = rings;
        }
    }

    /// Keys held, as staged.
    pub fn keys(&self) -> impl Iterator<Item = &Key> + '_ {
        self.objects.keys().map(|(_, k)| k)
    }

    /// How many writes are held for other replicas, as staged.
    pub fn hint_count(&self) -> usize {
        self.hints.len()
    }

    fn set_object(&mut self, key: &Key, object: Option<Object>) {
        let at = (hash(key.as_bytes()), key.clone());
        let before = match object {
            Some(o) => self.objects.insert(at.clone(), o),
            None => self.objects.remove(&at),
        };
        self.undo.entry(Slot::Object(at.0, at.1)).or_insert(before);
    }

    fn set_hint(&mut self, replica: &Address, key: &Key, object: Option<Object>) {
        let at = (replica.clone(), key.clone());
        let before = match object {
            Some(o) => self.hints.insert(at, o),
            None => self.hints.remove(&at),
        };
        self.undo.entry(Slot::Hint(replica.clone(), key.clone())).or_insert(before);
    }
}

impl Storage for MemoryStorage {
    type Error = Infallible;

    fn get(&mut self, key: &Key) -> Result<Option<Object>, Infallible> {
        Ok(self.objects.get(&(hash(key.as_bytes()), key.clone())).cloned())
    }

    fn scan(
        &mut self,
        span: Span,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<(Key, Object)>, Infallible> {
        use std::ops::Bound;
        let start = match after {
            Some(k) => Bound::Excluded((hash(k.as_bytes()), k.clone())),
            None => Bound::Included((span.from, Key::MIN)),
        };
        Ok(self
            .objects
            .range((start, Bound::Unbounded))
            .skip_while(|((h, _), _)| *h < span.from)
            .take_while(|((h, _), _)| *h <= span.to)
            .take(limit)
            .map(|((_, k), o)| (k.clone(), o.clone()))
            .collect())
    }

    fn put(&mut self, key: &Key, object: &Object) -> Result<(), Infallible> {
        self.set_object(key, Some(object.clone()));
        Ok(())
    }

    fn remove(&mut self, key: &Key) -> Result<(), Infallible> {
        self.set_object(key, None);
        Ok(())
    }

    fn hint(&mut self, replica: &Address, key: &Key) -> Result<Option<Object>, Infallible> {
        Ok(self.hints.get(&(replica.clone(), key.clone())).cloned())
    }

    fn put_hint(
        &mut self,
        replica: &Address,
        key: &Key,
        object: &Object,
    ) -> Result<(), Infallible> {
        self.set_hint(replica, key, Some(object.clone()));
        Ok(())
    }

    fn remove_hint(&mut self, replica: &Address, key: &Key) -> Result<(), Infallible> {
        self.set_hint(replica, key, None);
        Ok(())
    }

    fn hints(&mut self) -> Result<Vec<(Address, Key)>, Infallible> {
        Ok(self.hints.keys().cloned().collect())
    }

    fn rings(&mut self) -> Result<Vec<Vec<Address>>, Infallible> {
        Ok(self.rings.clone())
    }

    fn put_rings(&mut self, rings: &[Vec<Address>]) -> Result<(), Infallible> {
        let before = std::mem::replace(&mut self.rings, rings.to_vec());
        self.rings_undo.get_or_insert(before);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), Infallible> {
        self.undo.clear();
        self.rings_undo = None;
        Ok(())
    }
}
