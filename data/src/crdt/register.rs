//! Single-value types: a last-writer-wins register and an enable-wins flag.

use serde::{Deserialize, Serialize};

use crate::version::ActorId;

/// A value where the latest write wins: writes are ordered by their timestamp (milliseconds of
/// the writer's wall clock, passed in), then by actor (and value), so every replica picks the
/// same winner.
/// A write made after reading the register always wins over what it read, even when the writer's
/// clock is behind: it takes the read timestamp plus one if that is later than its own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LwwRegister {
    timestamp: u64,
    actor: Option<ActorId>,
    value: Vec<u8>,
}

impl LwwRegister {
    /// Empty, never written.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current value (empty when never written).
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The winning write's timestamp and actor, when written.
    pub fn written(&self) -> Option<(u64, ActorId)> {
        self.actor.map(|a| (self.timestamp, a))
    }

    /// `actor` writes `value` at wall-clock time `now_ms`.
    pub fn set(&mut self, actor: ActorId, now_ms: u64, value: Vec<u8>) {
        let after_read = if self.actor.is_some() { self.timestamp.saturating_add(1) } else { 0 };
        self.timestamp = now_ms.max(after_read);
        self.actor = Some(actor);
        self.value = value;
    }

    /// Takes in another replica's register: the later write wins.
    pub fn merge(&mut self, other: &Self) {
        // The value breaks a tie too, so that any two states merge the same way round.
        if (other.timestamp, other.actor, &other.value) > (self.timestamp, self.actor, &self.value)
        {
            self.clone_from(other);
        }
    }
}

/// A flag that, once enabled anywhere, stays enabled everywhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flag {
    enabled: bool,
}

impl Flag {
    /// Disabled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether it was enabled.
    pub fn enabled(self) -> bool {
        self.enabled
    }

    /// Enables it.
    pub fn enable(&mut self) {
        self.enabled = true;
    }

    /// Takes in another replica's flag.
    pub fn merge(&mut self, other: &Self) {
        self.enabled |= other.enabled;
    }
}
