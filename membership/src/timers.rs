//! The deadline table every sans-IO machine of convoke keeps its timers in: the membership core,
//! the singleton manager, the sharding machines and the bootstrap decider.
//!
//! A machine names its timers with a small enum and implements [`Timer`] for it; the table holds
//! at most one deadline per timer, and the machine's `poll_timeout` is the table's
//! [`earliest`](Timers::earliest) (with whatever else it computes). No clock is read here: every
//! instant comes in from the caller.

use std::fmt;
use std::marker::PhantomData;
use std::time::Instant;

/// A machine's timer names. `index` must be below the table's `N` and differ for every name;
/// for a field-less enum, `self as usize` does both.
pub trait Timer: Copy {
    /// The timer's slot in the table.
    fn index(self) -> usize;
}

/// At most one deadline for each of a machine's `N` timers, of type `T`.
pub struct Timers<T, const N: usize> {
    at: [Option<Instant>; N],
    names: PhantomData<T>,
}

impl<T, const N: usize> Clone for Timers<T, N> {
    fn clone(&self) -> Self {
        Self { at: self.at, names: PhantomData }
    }
}

impl<T, const N: usize> Default for Timers<T, N> {
    fn default() -> Self {
        Self { at: [None; N], names: PhantomData }
    }
}

impl<T, const N: usize> fmt::Debug for Timers<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.at.iter().flatten()).finish()
    }
}

impl<T: Timer, const N: usize> Timers<T, N> {
    /// Sets `t`'s deadline to `at`, replacing any earlier one.
    pub fn set(&mut self, t: T, at: Instant) {
        self.at[t.index()] = Some(at);
    }

    /// Sets `t`'s deadline to `at` unless one at or before `at` is already set.
    pub fn set_at_most(&mut self, t: T, at: Instant) {
        let slot = &mut self.at[t.index()];
        if slot.is_none_or(|old| old > at) {
            *slot = Some(at);
        }
    }

    /// `t`'s deadline, if it is set.
    pub fn get(&self, t: T) -> Option<Instant> {
        self.at[t.index()]
    }

    /// Whether `t` is set.
    pub fn is_set(&self, t: T) -> bool {
        self.get(t).is_some()
    }

    /// Clears `t`.
    pub fn clear(&mut self, t: T) {
        self.at[t.index()] = None;
    }

    /// Clears `t` and says so if its deadline has passed at `now`.
    pub fn take_due(&mut self, t: T, now: Instant) -> bool {
        let slot = &mut self.at[t.index()];
        match *slot {
            Some(at) if at <= now => {
                *slot = None;
                true
            }
            _ => false,
        }
    }

    /// The earliest deadline set.
    pub fn earliest(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[derive(Clone, Copy)]
    enum T {
        A,
        B,
    }

    impl Timer for T {
        fn index(self) -> usize {
            self as usize
        }
    }

    #[allow(clippy::disallowed_methods, reason = "tests need a base instant; only offsets matter")]
    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn a_timer_is_due_once_and_only_at_or_after_its_deadline() {
        let t0 = t0();
        let mut timers = Timers::<T, 2>::default();
        timers.set(T::A, t0 + Duration::from_secs(2));
        timers.set(T::B, t0 + Duration::from_secs(1));
        assert_eq!(timers.earliest(), Some(t0 + Duration::from_secs(1)));
        assert!(!timers.take_due(T::A, t0 + Duration::from_secs(1)));
        assert!(timers.take_due(T::B, t0 + Duration::from_secs(1)));
        assert!(!timers.take_due(T::B, t0 + Duration::from_secs(3)));
        assert_eq!(timers.earliest(), Some(t0 + Duration::from_secs(2)));
        timers.clear(T::A);
        assert_eq!(timers.earliest(), None);
    }

    #[test]
    fn set_at_most_keeps_the_earlier_deadline() {
        let t0 = t0();
        let mut timers = Timers::<T, 2>::default();
        timers.set_at_most(T::A, t0 + Duration::from_secs(2));
        timers.set_at_most(T::A, t0 + Duration::from_secs(3));
        assert_eq!(timers.get(T::A), Some(t0 + Duration::from_secs(2)));
        timers.set_at_most(T::A, t0 + Duration::from_secs(1));
        assert_eq!(timers.get(T::A), Some(t0 + Duration::from_secs(1)));
        assert!(!timers.is_set(T::B));
    }
}
