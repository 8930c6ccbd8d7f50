//! A small table of deadlines keyed by a machine's timer enum.

use std::time::Instant;

/// Deadlines for `N` timers, indexed by the timer enum's discriminant.
#[derive(Clone, Debug)]
pub(super) struct Timers<const N: usize>([Option<Instant>; N]);

impl<const N: usize> Default for Timers<N> {
    fn default() -> Self {
        Self([None; N])
    }
}

impl<const N: usize> Timers<N> {
    pub(super) fn set(&mut self, t: usize, at: Instant) {
        self.0[t] = Some(at);
    }

    /// Sets the deadline unless one at or before `at` is already set.
    pub(super) fn set_at_most(&mut self, t: usize, at: Instant) {
        if self.0[t].is_none_or(|old| old > at) {
            self.0[t] = Some(at);
        }
    }

    pub(super) fn get(&self, t: usize) -> Option<Instant> {
        self.0[t]
    }

    pub(super) fn clear(&mut self, t: usize) {
        self.0[t] = None;
    }

    /// Clears and reports the timer if its deadline has passed.
    pub(super) fn take_due(&mut self, t: usize, now: Instant) -> bool {
        match self.0[t] {
            Some(at) if at <= now => {
                self.0[t] = None;
                true
            }
            _ => false,
        }
    }

    pub(super) fn earliest(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
}
