//! Counters: grow-only, and up-and-down as two grow-only ones.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::version::ActorId;

/// A counter that only grows: each actor's own increments, merged by taking the larger count
/// per actor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GCounter {
    counts: BTreeMap<ActorId, u64>,
}

impl GCounter {
    /// Zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The sum of every actor's increments (saturating at `u64::MAX`).
    pub fn value(&self) -> u64 {
        self.counts.values().fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    /// `actor` adds `by`.
    pub fn increment(&mut self, actor: ActorId, by: u64) {
        let n = self.counts.entry(actor).or_insert(0);
        *n = n.saturating_add(by);
    }

    /// Takes in another replica's counts.
    pub fn merge(&mut self, other: &Self) {
        for (a, n) in &other.counts {
            let mine = self.counts.entry(*a).or_insert(0);
            *mine = (*mine).max(*n);
        }
    }

    /// Actors that ever incremented it.
    pub fn actor_count(&self) -> usize {
        self.counts.len()
    }
}

/// A counter that goes up and down: the increments less the decrements, each a [`GCounter`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PNCounter {
    up: GCounter,
    down: GCounter,
}

impl PNCounter {
    /// Zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Increments less decrements, clamped to the range of `i64`.
    pub fn value(&self) -> i64 {
        let v = i128::from(self.up.value()) - i128::from(self.down.value());
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
    }

    /// `actor` adds `by` (a negative `by` subtracts).
    pub fn add(&mut self, actor: ActorId, by: i64) {
        if by >= 0 {
            self.up.increment(actor, by.unsigned_abs());
        } else {
            self.down.increment(actor, by.unsigned_abs());
        }
    }

    /// Takes in another replica's counts.
    pub fn merge(&mut self, other: &Self) {
        self.up.merge(&other.up);
        self.down.merge(&other.down);
    }

    /// Actors that ever changed it.
    pub fn actor_count(&self) -> usize {
        self.up.actor_count() + self.down.actor_count()
    }
}
