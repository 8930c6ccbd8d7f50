//! The trace of a run: its hash, a fingerprint of everything that happened, to prove that running
//! the same seed twice does the same thing; and the latest steps as text, for failure reports.
//!
//! The hash is FNV-1a over the step stream (time, node, input kind, sender, emitted event types).
//! It is written here rather than taken from `std` because `DefaultHasher` does not promise the
//! same output across Rust releases, and a trace hash is only useful if it is stable.

use std::collections::VecDeque;
use std::hash::Hasher;
use std::time::Duration;

/// A 64-bit FNV-1a hasher.
#[derive(Clone, Debug)]
pub struct TraceHash(u64);

impl TraceHash {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// An empty trace.
    pub fn new() -> Self {
        Self(Self::OFFSET)
    }
}

impl TraceHash {
    /// Hashes one step of a layer: when, where, what.
    pub fn step(&mut self, now: Duration, slot: usize, what: &str) {
        use std::hash::Hash;
        now.hash(self);
        slot.hash(self);
        what.hash(self);
    }
}

impl Default for TraceHash {
    fn default() -> Self {
        Self::new()
    }
}

impl Hasher for TraceHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }
}

/// The trace hash and the step log. Hashing into it hashes into the trace hash.
#[derive(Clone, Debug)]
pub struct Trace {
    hash: TraceHash,
    /// How many of the latest steps to keep as text (0: none).
    keep: usize,
    log: VecDeque<String>,
}

impl Trace {
    /// An empty trace that keeps the latest `keep` steps as text.
    pub fn new(keep: usize) -> Self {
        Self { hash: TraceHash::new(), keep, log: VecDeque::new() }
    }

    /// Whether steps are kept as text: callers skip formatting what would be thrown away.
    pub fn is_logging(&self) -> bool {
        self.keep > 0
    }

    /// Appends a line for step `step` at global time `now`, dropping the oldest beyond `keep`.
    pub fn note(&mut self, now: Duration, step: u64, line: impl FnOnce() -> String) {
        if self.keep == 0 {
            return;
        }
        if self.log.len() == self.keep {
            self.log.pop_front();
        }
        self.log.push_back(format!("[{:>10.3}s #{step}] {}", now.as_secs_f64(), line()));
    }

    /// The latest steps as text, oldest first.
    pub fn log(&self) -> impl Iterator<Item = &str> {
        self.log.iter().map(String::as_str)
    }
}

impl Hasher for Trace {
    fn finish(&self) -> u64 {
        self.hash.finish()
    }

    fn write(&mut self, bytes: &[u8]) {
        self.hash.write(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_fnv1a_reference_values() {
        let mut h = TraceHash::new();
        assert_eq!(h.finish(), 0xcbf2_9ce4_8422_2325);
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }
}
