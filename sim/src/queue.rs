//! The event queue: everything scheduled to happen, in (time, sequence number) order.
//!
//! Events due at the same instant run in the order they were scheduled. The sequence number makes
//! that order total, so a run does not depend on how the heap breaks ties.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Duration;

/// Scheduled events of type `E`.
#[derive(Debug)]
pub struct Queue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
    seq: u64,
}

#[derive(Debug)]
struct Entry<E> {
    at: Duration,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self { heap: BinaryHeap::new(), seq: 0 }
    }
}

impl<E> Queue<E> {
    /// Schedules `event` at global time `at`, after everything already scheduled at `at`.
    pub fn push(&mut self, at: Duration, event: E) {
        self.seq += 1;
        self.heap.push(Reverse(Entry { at, seq: self.seq, event }));
    }

    /// Takes the next event if it is due at or before `deadline`, with its time.
    pub fn pop_due(&mut self, deadline: Duration) -> Option<(Duration, E)> {
        if self.heap.peek().is_none_or(|Reverse(e)| e.at > deadline) {
            return None;
        }
        let Reverse(e) = self.heap.pop().expect("peeked");
        Some((e.at, e.event))
    }

    /// Drops every event for which `keep` is false.
    pub fn retain(&mut self, mut keep: impl FnMut(&E) -> bool) {
        self.heap.retain(|Reverse(e)| keep(&e.event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_at_the_same_instant_run_in_the_order_they_were_scheduled() {
        let mut q = Queue::default();
        let s = Duration::from_secs;
        q.push(s(2), "c");
        q.push(s(1), "a");
        q.push(s(1), "b");
        assert_eq!(q.pop_due(s(0)), None);
        assert_eq!(q.pop_due(s(1)), Some((s(1), "a")));
        assert_eq!(q.pop_due(s(1)), Some((s(1), "b")));
        assert_eq!(q.pop_due(s(1)), None);
        assert_eq!(q.pop_due(s(5)), Some((s(2), "c")));
    }
}

/// The one timer a layer keeps per slot: its deadline, and a generation that tells the event of
/// the current arming from the events of earlier ones, which stay in the queue and are ignored.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimerSlot {
    generation: u64,
    at: Option<Duration>,
}

impl TimerSlot {
    /// Arms the timer for `at` (`None` disarms it): the event to schedule, with its generation,
    /// unless the timer is already armed for `at`.
    pub fn arm(&mut self, at: Option<Duration>) -> Option<(Duration, u64)> {
        if at == self.at {
            return None;
        }
        self.at = at;
        self.generation += 1;
        at.map(|at| (at, self.generation))
    }

    /// Whether the event of `generation` is the current one.
    pub fn is_current(&self, generation: u64) -> bool {
        self.generation == generation
    }

    /// The deadline is forgotten (its event fired, or the process paused): the next
    /// [`arm`](Self::arm) schedules an event even for the same deadline.
    pub fn forget(&mut self) {
        self.at = None;
    }

    /// Every scheduled event becomes stale.
    pub fn cancel(&mut self) {
        self.at = None;
        self.generation += 1;
    }
}
