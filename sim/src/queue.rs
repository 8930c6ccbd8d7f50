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
