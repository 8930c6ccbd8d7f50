//! Values that merge by themselves: concurrent writes of a CRDT never need a reader to resolve
//! them. The store keeps them like any value, as siblings when written concurrently, and merges
//! the siblings whenever it reads, repairs or compares replicas.
//!
//! Every merge here is commutative, associative and idempotent (property tests in `tests.rs`),
//! so replicas that have taken in the same updates in any order and any number of times hold
//! the same state.

mod counter;
mod register;
mod set;

use serde::{Deserialize, Serialize};

pub use counter::{GCounter, PNCounter};
pub use register::{Flag, LwwRegister};
pub use set::{OrMap, OrSet};

use crate::version::ActorId;

/// One of the CRDT types.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Crdt {
    /// A counter that only grows.
    GCounter(GCounter),
    /// A counter that goes up and down.
    PNCounter(PNCounter),
    /// A flag that stays enabled once enabled.
    Flag(Flag),
    /// A value where the latest write wins.
    LwwRegister(LwwRegister),
    /// A set where an add wins over a concurrent remove.
    OrSet(OrSet),
    /// A map from strings to CRDTs, its keys an [`OrSet`].
    OrMap(OrMap),
}

/// The kind of a [`Crdt`], in the order that resolves two kinds at one map key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrdtKind {
    /// [`GCounter`].
    GCounter,
    /// [`PNCounter`].
    PnCounter,
    /// [`Flag`].
    Flag,
    /// [`LwwRegister`].
    LwwRegister,
    /// [`OrSet`].
    OrSet,
    /// [`OrMap`].
    OrMap,
}

impl CrdtKind {
    /// Its name, as the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::GCounter => "g-counter",
            Self::PnCounter => "pn-counter",
            Self::Flag => "flag",
            Self::LwwRegister => "lww-register",
            Self::OrSet => "or-set",
            Self::OrMap => "or-map",
        }
    }

    /// The empty value of this kind.
    pub fn empty(self) -> Crdt {
        match self {
            Self::GCounter => Crdt::GCounter(GCounter::new()),
            Self::PnCounter => Crdt::PNCounter(PNCounter::new()),
            Self::Flag => Crdt::Flag(Flag::new()),
            Self::LwwRegister => Crdt::LwwRegister(LwwRegister::new()),
            Self::OrSet => Crdt::OrSet(OrSet::new()),
            Self::OrMap => Crdt::OrMap(OrMap::new()),
        }
    }
}

/// Two CRDTs of different kinds met where one kind was expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the value is a {}, not a {}", found.name(), expected.name())]
pub struct KindMismatch {
    /// The kind the operation needs.
    pub expected: CrdtKind,
    /// The kind found.
    pub found: CrdtKind,
}

/// An update of a CRDT, as a caller asks for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrdtOp {
    /// A [`GCounter`] grows by this much.
    Increment(u64),
    /// A [`PNCounter`] changes by this much.
    Add(i64),
    /// A [`Flag`] is enabled.
    Enable,
    /// An [`LwwRegister`] takes this value.
    Set(Vec<u8>),
    /// An [`OrSet`] gains this element.
    Insert(String),
    /// An [`OrSet`] loses this element.
    Remove(String),
    /// An [`OrMap`]'s value at `key`, of kind `kind` (empty when absent), is updated by `op`.
    Update {
        /// The map key.
        key: String,
        /// The kind of its value.
        kind: CrdtKind,
        /// What to do to it.
        op: Box<CrdtOp>,
    },
    /// An [`OrMap`] loses this key.
    Delete(String),
}

impl CrdtOp {
    /// The kind of CRDT it applies to.
    pub fn kind(&self) -> CrdtKind {
        match self {
            Self::Increment(_) => CrdtKind::GCounter,
            Self::Add(_) => CrdtKind::PnCounter,
            Self::Enable => CrdtKind::Flag,
            Self::Set(_) => CrdtKind::LwwRegister,
            Self::Insert(_) | Self::Remove(_) => CrdtKind::OrSet,
            Self::Update { .. } | Self::Delete(_) => CrdtKind::OrMap,
        }
    }
}

impl Crdt {
    /// Its kind.
    pub fn kind(&self) -> CrdtKind {
        match self {
            Self::GCounter(_) => CrdtKind::GCounter,
            Self::PNCounter(_) => CrdtKind::PnCounter,
            Self::Flag(_) => CrdtKind::Flag,
            Self::LwwRegister(_) => CrdtKind::LwwRegister,
            Self::OrSet(_) => CrdtKind::OrSet,
            Self::OrMap(_) => CrdtKind::OrMap,
        }
    }

    /// Takes in another replica's state of the same kind; refused, with nothing changed, for
    /// another kind.
    pub fn merge(&mut self, other: &Self) -> Result<(), KindMismatch> {
        match (self, other) {
            (Self::GCounter(a), Self::GCounter(b)) => a.merge(b),
            (Self::PNCounter(a), Self::PNCounter(b)) => a.merge(b),
            (Self::Flag(a), Self::Flag(b)) => a.merge(b),
            (Self::LwwRegister(a), Self::LwwRegister(b)) => a.merge(b),
            (Self::OrSet(a), Self::OrSet(b)) => a.merge(b),
            (Self::OrMap(a), Self::OrMap(b)) => a.merge(b),
            (a, b) => return Err(KindMismatch { expected: a.kind(), found: b.kind() }),
        }
        Ok(())
    }

    /// `actor` applies `op` at wall-clock time `now_ms` (used by registers); refused, with
    /// nothing changed, when `op` is for another kind.
    pub fn apply(&mut self, actor: ActorId, now_ms: u64, op: CrdtOp) -> Result<(), KindMismatch> {
        let found = self.kind();
        let mismatch = |op: &CrdtOp| KindMismatch { expected: op.kind(), found };
        match (self, op) {
            (Self::GCounter(c), CrdtOp::Increment(by)) => c.increment(actor, by),
            (Self::PNCounter(c), CrdtOp::Add(by)) => c.add(actor, by),
            (Self::Flag(f), CrdtOp::Enable) => f.enable(),
            (Self::LwwRegister(r), CrdtOp::Set(value)) => r.set(actor, now_ms, value),
            (Self::OrSet(s), CrdtOp::Insert(e)) => s.add(actor, e),
            (Self::OrSet(s), CrdtOp::Remove(e)) => s.remove(&e),
            (Self::OrMap(m), CrdtOp::Update { key, kind, op }) => {
                let inner = kind.empty();
                if op.kind() != kind {
                    return Err(KindMismatch { expected: kind, found: op.kind() });
                }
                let mut result = Ok(());
                m.update(actor, &key, inner, |v| result = v.apply(actor, now_ms, *op))?;
                result?;
            }
            (Self::OrMap(m), CrdtOp::Delete(key)) => m.remove(&key),
            (_, op) => return Err(mismatch(&op)),
        }
        Ok(())
    }

    /// Actors named in it (what grows with the number of writers).
    pub fn actor_count(&self) -> usize {
        match self {
            Self::GCounter(c) => c.actor_count(),
            Self::PNCounter(c) => c.actor_count(),
            Self::Flag(_) => 0,
            Self::LwwRegister(r) => usize::from(r.written().is_some()),
            Self::OrSet(s) => s.actor_count(),
            Self::OrMap(m) => m.actor_count(),
        }
    }
}

#[cfg(test)]
mod tests;
